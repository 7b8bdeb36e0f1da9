import crypto from 'node:crypto';

/**
 * What tells audits from client chats, measured: the features a solver sees of a chat task (every
 * payload field's value but the messages' and tools' text) and a naive Bayes classifier over them.
 */

/** What a solver sees of a chat's payload, less its text: every field's value but the messages' and tools' contents. */
export function features(payload: Record<string, unknown>): Record<string, string> {
  const messages = payload.messages as { role: string }[];
  const tools = (payload.tools ?? []) as unknown[];
  const choice = payload.tool_choice;
  const others = Object.entries(payload).filter(([key]) => !['messages', 'tools', 'tool_choice', 'response_format'].includes(key));
  return {
    keys: Object.keys(payload).sort().join(','),
    roles: messages.map((message) => message.role).join(','),
    tools: String(tools.length),
    tool_choice: choice === undefined ? 'absent' : typeof choice === 'string' ? choice : 'function',
    response_format: String((payload.response_format as { type?: string } | undefined)?.type ?? 'none'),
    ...Object.fromEntries(others.map(([key, value]) => [key, typeof value === 'string' && !/^[a-z0-9_./-]{1,24}$/.test(value) ? `string:${value.length}` : JSON.stringify(value)])),
  };
}

/**
 * A naive Bayes classifier over categorical features (equal priors), trained on one half of the
 * samples, scored on the other: its balanced accuracy (the mean of the share of audits and the share of
 * client chats it names right), 0.5 for a classifier that cannot tell them apart, whatever the counts.
 */
export function classifierAccuracy(audits: Record<string, string>[], clients: Record<string, string>[]): number {
  const labelled = [...audits.map((x) => ({ x, audit: true })), ...clients.map((x) => ({ x, audit: false }))];
  for (let i = labelled.length - 1; i > 0; i--) {
    const j = crypto.randomInt(i + 1);
    [labelled[i], labelled[j]] = [labelled[j]!, labelled[i]!];
  }
  const train = labelled.filter((_, i) => i % 2 === 0);
  const test = labelled.filter((_, i) => i % 2 === 1);
  const names = [...new Set(labelled.flatMap(({ x }) => Object.keys(x)))];
  const model = (audit: boolean) => {
    const rows = train.filter((row) => row.audit === audit);
    const by = new Map(names.map((name) => [name, new Map<string, number>()]));
    for (const row of rows) for (const name of names) by.get(name)!.set(row.x[name] ?? '∅', (by.get(name)!.get(row.x[name] ?? '∅') ?? 0) + 1);
    return (x: Record<string, string>) => names.reduce((sum, name) => sum + Math.log(((by.get(name)!.get(x[name] ?? '∅') ?? 0) + 1) / (rows.length + 2)), 0);
  };
  const [audit, client] = [model(true), model(false)];
  const recall = (label: boolean) => {
    const rows = test.filter((row) => row.audit === label);
    return rows.filter(({ x }) => audit(x) > client(x) === label).length / rows.length;
  };
  return (recall(true) + recall(false)) / 2;
}
