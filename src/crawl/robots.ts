/**
 * robots.txt as RFC 9309 reads it: the group for the most specific matching user agent (else `*`),
 * and within it the longest matching Allow / Disallow rule (`*` and `$` as wildcards); a tie goes to
 * Allow. Pure: the crawl activity fetches the file.
 */

export interface RobotsRules {
  allow: string[];
  disallow: string[];
  sitemaps: string[];
}

export const NO_RULES: RobotsRules = { allow: [], disallow: [], sitemaps: [] };

export function parseRobots(text: string, userAgent: string): RobotsRules {
  const agent = userAgent.toLowerCase();
  const groups: Array<{ agents: string[]; allow: string[]; disallow: string[] }> = [];
  const sitemaps: string[] = [];
  let current: { agents: string[]; allow: string[]; disallow: string[] } | null = null;
  let inAgents = false;
  for (const rawLine of text.split(/\r?\n/)) {
    const line = rawLine.replace(/#.*$/, '').trim();
    const match = /^([A-Za-z-]+)\s*:\s*(.*)$/.exec(line);
    if (!match) continue;
    const field = match[1]!.toLowerCase();
    const value = match[2]!.trim();
    if (field === 'sitemap') {
      if (value) sitemaps.push(value);
      continue;
    }
    if (field === 'user-agent') {
      if (!current || !inAgents) groups.push((current = { agents: [], allow: [], disallow: [] }));
      current.agents.push(value.toLowerCase());
      inAgents = true;
      continue;
    }
    inAgents = false;
    if (!current) continue;
    if (field === 'allow' && value) current.allow.push(value);
    if (field === 'disallow' && value) current.disallow.push(value);
  }
  const named = groups.filter((group) => group.agents.some((name) => name !== '*' && agent.includes(name)));
  const chosen = named.length > 0 ? named : groups.filter((group) => group.agents.includes('*'));
  return {
    allow: chosen.flatMap((group) => group.allow),
    disallow: chosen.flatMap((group) => group.disallow),
    sitemaps,
  };
}

function ruleMatches(rule: string, path: string): boolean {
  const anchored = rule.endsWith('$');
  const body = (anchored ? rule.slice(0, -1) : rule)
    .split('*')
    .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
    .join('.*');
  return new RegExp(`^${body}${anchored ? '$' : ''}`).test(path);
}

/** Whether the rules let the URL be fetched. */
export function robotsAllow(rules: RobotsRules, url: string): boolean {
  const parsed = new URL(url);
  const path = `${parsed.pathname}${parsed.search}`;
  const longest = (rules_: string[]) =>
    Math.max(-1, ...rules_.filter((rule) => ruleMatches(rule, path)).map((rule) => rule.length));
  return longest(rules.allow) >= longest(rules.disallow);
}
