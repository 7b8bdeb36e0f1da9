import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { DomainPolicyFile, evaluateHostRules, evaluateTarget, matchStrength, type DomainPolicy } from '../../src/policy/domain-policy';
import { DomainGuard, type Resolver } from '../../src/guard/domain-guard';
import { readDomainPolicy } from '../../src/policy/loader';
import { assertAllowedTarget } from '../../src/http/target-policy';

const policy = (input: Partial<DomainPolicy>): DomainPolicy => DomainPolicyFile.parse(input);
const allowed = (p: DomainPolicy, host: string) => evaluateHostRules(p, host).allowed;

describe('domain policy rules', () => {
  test('an exact pattern matches only that host; a wildcard matches subdomains at any depth, not the apex', () => {
    expect(matchStrength('example.com', 'example.com')).toBeGreaterThan(0);
    expect(matchStrength('example.com', 'www.example.com')).toBe(-1);
    expect(matchStrength('*.example.com', 'a.b.example.com')).toBeGreaterThan(0);
    expect(matchStrength('*.example.com', 'example.com')).toBe(-1);
    expect(matchStrength('*.example.com', 'badexample.com')).toBe(-1);
    expect(matchStrength('*', 'anything.test')).toBe(0);
  });

  test('deny rules refuse, unmatched hosts get the default', () => {
    const p = policy({ deny: ['*.blocked.test', 'evil.test'] });
    expect(allowed(p, 'evil.test')).toBe(false);
    expect(allowed(p, 'EVIL.test.')).toBe(false);
    expect(allowed(p, 'www.blocked.test')).toBe(false);
    expect(allowed(p, 'blocked.test')).toBe(true);
    expect(allowed(p, 'example.com')).toBe(true);
    expect(evaluateHostRules(p, 'evil.test')).toEqual({ allowed: false, reason: 'rule', message: expect.stringContaining('"evil.test"') });
  });

  test('the most specific pattern wins: an allowed host inside a denied domain, a denied host inside an allowed one', () => {
    const p = policy({ deny: ['*.corp.test', 'secret.open.test'], allow: ['wiki.corp.test', '*.open.test'] });
    expect(allowed(p, 'wiki.corp.test')).toBe(true);
    expect(allowed(p, 'hr.corp.test')).toBe(false);
    expect(allowed(p, 'docs.open.test')).toBe(true);
    expect(allowed(p, 'secret.open.test')).toBe(false);
  });

  test('a tie goes to deny', () => {
    expect(allowed(policy({ allow: ['*.x.test'], deny: ['*.x.test'] }), 'a.x.test')).toBe(false);
  });

  test('with default deny only allowed hosts pass', () => {
    const p = policy({ default: 'deny', allow: ['example.com', '*.example.org'] });
    expect(allowed(p, 'example.com')).toBe(true);
    expect(allowed(p, 'docs.example.org')).toBe(true);
    expect(allowed(p, 'example.net')).toBe(false);
  });

  test('the file format refuses unknown keys and malformed patterns', () => {
    expect(DomainPolicyFile.safeParse({ deny: ['ok.test'], block: [] }).success).toBe(false);
    expect(DomainPolicyFile.safeParse({ deny: ['bad pattern'] }).success).toBe(false);
    expect(DomainPolicyFile.safeParse({ deny: ['a.*.test'] }).success).toBe(false);
    expect(DomainPolicyFile.safeParse({ deny: ['10.0.0.1', '[::1]', '*'] }).success).toBe(true);
  });

  const open = policy({});
  const strict = { allowPrivateNetworks: false };
  test.each([
    ['http://127.0.0.1:8080/x', 'private_network'],
    ['http://10.1.2.3/', 'private_network'],
    ['http://192.168.0.10/', 'private_network'],
    ['http://169.254.169.254/latest/meta-data', 'private_network'],
    ['http://[::1]/', 'private_network'],
    ['http://[::ffff:127.0.0.1]/', 'private_network'],
    ['http://2130706433/', 'private_network'],
    ['http://localhost:3000/', 'private_network'],
    ['http://api.localhost/', 'private_network'],
    ['file:///etc/passwd', 'scheme'],
    ['gopher://example.com/', 'scheme'],
    ['example.com', 'invalid_url'],
  ])('%s is refused (%s) when private networks are not allowed', (url, reason) => {
    const verdict = evaluateTarget(open, url, strict);
    expect(verdict).toMatchObject({ allowed: false, reason });
    // A private-network refusal says what would be served instead.
    if (reason === 'private_network') expect(verdict).toMatchObject({ message: expect.stringContaining('Only public addresses are served unless') });
  });

  test('public literal addresses pass; names need DNS; the switch (file or environment) admits private targets', () => {
    expect(evaluateTarget(open, 'https://93.184.215.14/', strict)).toEqual({ allowed: true });
    expect(evaluateTarget(open, 'https://example.com/a', strict)).toEqual({ needsDns: 'example.com' });
    expect(evaluateTarget(open, 'http://127.0.0.1/', { allowPrivateNetworks: true })).toEqual({ allowed: true });
    expect(evaluateTarget(policy({ allow_private_networks: true }), 'http://localhost/', strict)).toEqual({ allowed: true });
    // Rules still apply when private networks are allowed.
    expect(evaluateTarget(policy({ deny: ['localhost'] }), 'http://localhost/', { allowPrivateNetworks: true })).toMatchObject({ allowed: false, reason: 'rule' });
  });

  test('the shipped policy allows example.com and refuses cloud metadata names', () => {
    const shipped = readDomainPolicy(path.resolve(__dirname, '../../config/domain-policy.json'));
    expect(allowed(shipped, 'example.com')).toBe(true);
    expect(allowed(shipped, 'www.example.com')).toBe(true);
    expect(allowed(shipped, 'metadata.google.internal')).toBe(false);
    expect(shipped.allow_private_networks).toBe(false);
  });
});

describe('domain guard', () => {
  const logger = pino({ level: 'silent' });
  let dir: string;
  let file: string;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'policy-'));
    file = path.join(dir, 'policy.json');
    fs.writeFileSync(file, JSON.stringify({ deny: ['blocked.test'] }));
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  const guard = (resolve: Resolver, dnsTimeoutMs?: number) => new DomainGuard({ file, allowPrivateNetworks: false, logger, nodeId: 'n1', resolve, dnsTimeoutMs });

  test('a name resolving to a private, loopback or link-local address is refused, and the HTTP layer answers 403 domain_blocked', async () => {
    const answers: Record<string, string[]> = { 'internal.test': ['10.0.0.7'], 'mixed.test': ['93.184.215.14', '127.0.0.1'], 'meta.test': ['169.254.169.254'], 'public.test': ['93.184.215.14'] };
    const g = guard(async (host) => answers[host] ?? []);
    const internal = await g.check('http://internal.test/');
    expect(internal).toMatchObject({ allowed: false, reason: 'private_network', message: 'Targets at private addresses are refused: internal.test. Only public addresses are served unless the operator sets ALLOW_PRIVATE_NETWORKS=true.' });
    expect(await g.check('http://mixed.test/')).toMatchObject({ allowed: false, reason: 'private_network' });
    expect(await g.check('http://meta.test/')).toMatchObject({ allowed: false, reason: 'private_network' });
    expect(await g.check('http://public.test/')).toEqual({ allowed: true });
    await expect(assertAllowedTarget(g, 'http://internal.test/', ['body', 'url'])).rejects.toMatchObject({ status: 403, type: 'domain_blocked' });
    await expect(assertAllowedTarget(g, 'http://blocked.test/', ['body', 'url'])).rejects.toMatchObject({ status: 403, type: 'domain_blocked' });
    await expect(assertAllowedTarget(g, 'not a url', ['body', 'payload', 'url'])).rejects.toMatchObject({
      detail: [{ type: 'url_parsing', loc: ['body', 'payload', 'url'], msg: expect.any(String), input: 'not a url' }],
    });
  });

  test('a host that does not resolve, or not in time, is let through to the solver', async () => {
    const failing = guard(async () => {
      throw Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' });
    });
    expect(await failing.check('https://example.com/')).toEqual({ allowed: true });
    const hanging = guard(() => new Promise<string[]>(() => undefined), 50);
    expect(await hanging.check('https://slow.test/')).toEqual({ allowed: true });
  });

  test('answers are cached, so repeated checks of one host resolve it once', async () => {
    let lookups = 0;
    const g = guard(async () => {
      lookups += 1;
      return ['10.9.9.9'];
    });
    for (let i = 0; i < 5; i++) expect((await g.check('http://cached.test/x')).allowed).toBe(false);
    expect(lookups).toBe(1);
  });

  test('reload re-reads the file; an invalid file keeps the policy in force and says what is wrong', async () => {
    const g = guard(async () => ['93.184.215.14']);
    expect((await g.check('http://newly.test/')).allowed).toBe(true);
    fs.writeFileSync(file, JSON.stringify({ deny: ['newly.test'] }));
    g.reload();
    expect((await g.check('http://newly.test/')).allowed).toBe(false);
    fs.writeFileSync(file, '{"deny": [');
    expect(() => g.reload()).toThrow(/not valid JSON/);
    fs.writeFileSync(file, JSON.stringify({ deny: 'oops' }));
    expect(() => g.reload()).toThrow(new RegExp(`${file.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')} is invalid: deny`));
    expect((await g.check('http://newly.test/')).allowed).toBe(false);
  });

  test('a missing file is an error that names DOMAIN_POLICY_FILE', () => {
    expect(() => new DomainGuard({ file: path.join(dir, 'nope.json'), allowPrivateNetworks: false, logger, nodeId: 'n' })).toThrow(/DOMAIN_POLICY_FILE/);
  });
});
