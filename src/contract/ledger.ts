/**
 * The kinds of ledger entry and their effect on an account's balances, and the states of a hold: pure
 * data, read by the ledger (src/db/ledger.ts), by the HTTP schemas, and by the schema test that proves
 * the SQL CHECKs on `ledger_entries.kind` and `holds.status` equal to them.
 */

/** The platform's own account: it pays for canaries and verification runs, and earns the fees. */
export const PLATFORM_ACCOUNT_ID = 'platform';

export type BalanceColumn = 'available' | 'held' | 'lifetime_earned' | 'lifetime_spent' | 'lifetime_deposited';

/**
 * Every kind of ledger entry and what its amount does to the account's balance columns (+1 adds it,
 * -1 takes it away). The running balances, the balance recomputed from the entries and the ledger's
 * CHECK on `kind` all follow this table.
 */
export const LEDGER_ENTRY_KINDS = {
  /** Points an admin adds. */
  deposit: { available: 1, lifetime_deposited: 1 },
  /** A task's maximum price set aside while it runs. */
  hold: { available: -1, held: 1 },
  /** What a settled task costs, taken from its hold. */
  capture: { held: -1, lifetime_spent: 1 },
  /** What is left of a hold, given back. */
  release: { held: -1, available: 1 },
  /** A solver's pay for a task. */
  payout: { available: 1, lifetime_earned: 1 },
  /** The platform's share of a settled task. */
  fee: { available: 1, lifetime_earned: 1 },
  /** A solver's unvested pay for a task, taken back from its earnings hold (docs/trust.md, "Escrow and refunds"). */
  forfeit: { held: -1, lifetime_earned: -1 },
  /** The platform's share of a refunded task, given back. */
  fee_return: { available: -1, lifetime_earned: -1 },
  /** What a client paid for a task proven or judged wrong, given back: at most its capture. */
  refund: { available: 1, lifetime_spent: -1 },
} as const satisfies Record<string, Partial<Record<BalanceColumn, 1 | -1>>>;

export type LedgerEntryKind = keyof typeof LEDGER_ENTRY_KINDS;

/** The states of a hold: open while its task runs, then settled (something was charged) or released (nothing was). */
export const HOLD_STATES = ['open', 'settled', 'released'] as const;
