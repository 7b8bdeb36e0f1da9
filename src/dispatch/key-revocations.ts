import { API_KEY_REVOKED_CHANNEL, revokedKeys } from '../db/accounts';
import type { NotifyBus } from '../db/notify';
import type { Db } from '../db/pool';
import type { Logger } from '../logger';
import type { SolverHub } from './hub';

/**
 * Closes this node's solver sockets whose API key was revoked, on any node: the revocation is announced
 * by the transaction that commits it (NOTIFY on API_KEY_REVOKED_CHANNEL), which every node hears. A
 * socket is authenticated once, at its upgrade, so without this it would outlive its key.
 */
export class KeyRevocations {
  constructor(private readonly deps: { bus: NotifyBus; db: Db; hub: SolverHub; logger: Logger }) {}

  async start(): Promise<void> {
    await this.deps.bus.subscribe(API_KEY_REVOKED_CHANNEL, (payload) => {
      const keyId = (payload as { key_id?: unknown })?.key_id;
      if (typeof keyId === 'string') this.deps.hub.closeKey(keyId);
    });
    // Announcements made while the notification connection was down are lost: check every key held here.
    this.deps.bus.onReconnect(() => void this.check(this.deps.hub.connectedKeys()));
  }

  /**
   * Closes the sockets of those keys that are revoked by now. Called for a socket just attached: its key
   * was read before the socket joined the hub, so a revocation announced in between did not reach it.
   */
  async check(keyIds: readonly string[]): Promise<void> {
    try {
      for (const keyId of await revokedKeys(this.deps.db, keyIds)) this.deps.hub.closeKey(keyId);
    } catch (error) {
      this.deps.logger.warn({ err: error }, "could not check solver connections' keys");
    }
  }
}
