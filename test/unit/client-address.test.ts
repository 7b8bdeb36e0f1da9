import type { IncomingMessage } from 'node:http';
import { loadConfig } from '../../src/config';
import { clientAddress, trustProxy } from '../../src/http/address-limits';

const request = (remoteAddress: string, forwardedFor?: string | string[]) =>
  ({ socket: { remoteAddress }, headers: forwardedFor === undefined ? {} : { 'x-forwarded-for': forwardedFor } }) as unknown as IncomingMessage;

describe('the client address a limit counts', () => {
  test('with no trusted proxy (the default) it is the socket\'s peer, whatever X-Forwarded-For says', () => {
    const none = trustProxy(loadConfig({}).trustProxy);
    expect(clientAddress(request('203.0.113.5', '198.51.100.1'), none)).toBe('203.0.113.5');
    expect(clientAddress(request('127.0.0.1', '198.51.100.1, 198.51.100.2'), none)).toBe('127.0.0.1');
    expect(clientAddress(request('::ffff:127.0.0.1'), none)).toBe('127.0.0.1');
    expect(clientAddress(request('2001:db8::7'), none)).toBe('2001:db8::7');
    expect(clientAddress(request('fe80::1%eth0'), none)).toBe('fe80::1');
  });

  test('behind trusted proxies it is the first hop, from the right, that no trusted proxy added; what the client wrote to the left is ignored', () => {
    const trusted = trustProxy(loadConfig({ TRUST_PROXY: 'loopback, 10.0.0.0/8' }).trustProxy);
    // The client forged 1.2.3.4; the proxy appended the address it saw.
    expect(clientAddress(request('127.0.0.1', '1.2.3.4, 203.0.113.9'), trusted)).toBe('203.0.113.9');
    // Two proxies in a row (a load balancer at 10.1.2.3 in front of a local one).
    expect(clientAddress(request('::ffff:127.0.0.1', ['1.2.3.4, 203.0.113.9', '10.1.2.3']), trusted)).toBe('203.0.113.9');
    // A peer that is not a trusted proxy is the client, even with the header.
    expect(clientAddress(request('198.51.100.7', '10.0.0.1'), trusted)).toBe('198.51.100.7');
    // Garbage where an address should be stops at the proxy that passed it on.
    expect(clientAddress(request('127.0.0.1', 'not-an-address'), trusted)).toBe('127.0.0.1');
    // All hops trusted: the leftmost is the client.
    expect(clientAddress(request('127.0.0.1', '10.9.9.9'), trusted)).toBe('10.9.9.9');
  });

  test('TRUST_PROXY takes addresses, CIDR ranges and the names loopback, linklocal, uniquelocal; anything else is refused naming the variable', () => {
    expect(loadConfig({}).trustProxy).toEqual([]);
    expect(loadConfig({ TRUST_PROXY: '192.0.2.1, 2001:db8::/32' }).trustProxy).toEqual(['192.0.2.1/32', '2001:db8::/32']);
    expect(loadConfig({ TRUST_PROXY: 'uniquelocal' }).trustProxy).toContain('172.16.0.0/12');
    for (const bad of ['true', '*', '10.0.0.0/33', '10.0.0.1/', 'proxy.example', '::1/129']) {
      expect(() => loadConfig({ TRUST_PROXY: bad })).toThrow(/TRUST_PROXY/);
    }
  });

  test('the per-address limits have defaults and refuse values that are not positive integers', () => {
    expect(loadConfig({}).addressLimits).toEqual({ register: 20, unauthenticated: 60, solverConnect: 120 });
    expect(() => loadConfig({ REGISTER_LIMIT_PER_HOUR: '0' })).toThrow(/REGISTER_LIMIT_PER_HOUR/);
    expect(() => loadConfig({ UNAUTHENTICATED_LIMIT_PER_MINUTE: 'many' })).toThrow(/UNAUTHENTICATED_LIMIT_PER_MINUTE/);
    expect(() => loadConfig({ SOLVER_CONNECT_LIMIT_PER_MINUTE: '-1' })).toThrow(/SOLVER_CONNECT_LIMIT_PER_MINUTE/);
  });
});
