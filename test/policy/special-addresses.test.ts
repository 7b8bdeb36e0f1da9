import os from 'node:os';
import { DomainPolicyFile, evaluateTarget } from '../../src/policy/domain-policy';
import { addressBytes, refusalReason } from '../../src/policy/special-addresses';
import { assertTargetAllowed } from '../../src/solver/net-guard';

/** One table for the classifier every address check uses: the IANA special-purpose registries, multicast and carried IPv4. */
const REFUSED: Array<[address: string, reason: string]> = [
  ['0.0.0.0', 'unspecified'],
  ['0.1.2.3', 'unspecified'],
  ['10.1.2.3', 'private'],
  ['100.64.0.1', 'private'],
  ['100.127.255.254', 'private'],
  ['127.0.0.1', 'loopback'],
  ['127.8.9.10', 'loopback'],
  ['169.254.169.254', 'link-local'],
  ['172.16.0.1', 'private'],
  ['172.31.255.255', 'private'],
  ['192.0.0.8', 'reserved'],
  ['192.0.0.170', 'reserved'],
  ['192.0.2.2', 'documentation'],
  ['192.31.196.1', 'reserved'],
  ['192.52.193.1', 'reserved'],
  ['192.88.99.1', 'reserved'],
  ['192.168.1.1', 'private'],
  ['192.175.48.6', 'reserved'],
  ['198.18.0.1', 'benchmarking'],
  ['198.19.255.255', 'benchmarking'],
  ['198.51.100.7', 'documentation'],
  ['203.0.113.9', 'documentation'],
  ['224.0.0.1', 'multicast'],
  ['239.255.255.250', 'multicast'],
  ['240.0.0.1', 'reserved'],
  ['255.255.255.255', 'broadcast'],
  ['::', 'unspecified'],
  ['::1', 'loopback'],
  ['::ffff:127.0.0.1', 'loopback'],
  ['::ffff:7f00:1', 'loopback'],
  ['::ffff:a9fe:a9fe', 'link-local'],
  ['::ffff:192.0.2.1', 'documentation'],
  ['::ffff:0:127.0.0.1', 'loopback'],
  ['::ffff:0:7f00:1', 'loopback'],
  ['::ffff:0:8.8.8.8', 'reserved'],
  ['::127.0.0.1', 'loopback'],
  ['::8.8.8.8', 'reserved'],
  ['::2', 'unspecified'],
  ['64:ff9b::10.0.0.1', 'private'],
  ['64:ff9b::a00:1', 'private'],
  ['64:ff9b::192.0.2.33', 'documentation'],
  ['64:ff9b:1::8.8.8.8', 'private'],
  ['100::1', 'reserved'],
  ['2001::1', 'reserved'],
  ['2001:0:4136:e378:8000:63bf:3fff:fdd2', 'reserved'],
  ['2001:2::1', 'benchmarking'],
  ['2001:db8::1', 'documentation'],
  ['2001:db8:ffff::1', 'documentation'],
  ['2002:c0a8:0101::1', 'private'],
  ['2002:7f00:1::', 'loopback'],
  ['2620:4f:8000::1', 'reserved'],
  ['3fff::1', 'documentation'],
  ['5f00::1', 'reserved'],
  ['fc00::1', 'private'],
  ['fd12:3456::1', 'private'],
  ['fe80::1', 'link-local'],
  ['fe80::1%eth0', 'link-local'],
  ['febf::1', 'link-local'],
  ['fec0::1', 'private'],
  ['ff02::1', 'multicast'],
  ['ff0e::1', 'multicast'],
  ['not an address', 'not an IP address'],
];

const PUBLIC = ['93.184.216.34', '8.8.8.8', '1.1.1.1', '172.32.0.1', '100.128.0.1', '192.0.3.1', '198.20.0.1', '223.255.255.255', '2606:4700:4700::1111', '2a00:1450:4001::200e', '::ffff:8.8.8.8', '64:ff9b::8.8.8.8', '2002:808:808::1'];

test.each(REFUSED)('refuses %s as %s', (address, reason) => {
  expect(refusalReason(address)).toBe(reason);
});

test.each(PUBLIC)('allows the public address %s', (address) => {
  expect(refusalReason(address)).toBeNull();
});

test('IPv6 text forms give the same bytes', () => {
  expect(addressBytes('::ffff:0:127.0.0.1')).toEqual(addressBytes('0:0:0:0:ffff:0:7f00:1'));
  expect(addressBytes('64:ff9b::10.0.0.1')).toEqual(addressBytes('64:ff9b:0:0:0:0:a00:1'));
  expect(addressBytes('1.2.3.4')).toEqual([1, 2, 3, 4]);
  expect(addressBytes('example.com')).toBeNull();
});

describe("this host's own addresses", () => {
  afterEach(() => jest.restoreAllMocks());

  test('an address of one of its interfaces is refused, a public neighbour is not', () => {
    // Past the cache of the interfaces, with a public address on one of them.
    jest.spyOn(Date, 'now').mockReturnValue(Date.now() + 3_600_000);
    jest.spyOn(os, 'networkInterfaces').mockReturnValue({
      eth0: [{ address: '93.184.216.34', netmask: '255.255.255.0', family: 'IPv4', mac: '00:00:00:00:00:01', internal: false, cidr: '93.184.216.34/24' }],
      eth1: [{ address: '2a01:4f8::2', netmask: 'ffff:ffff:ffff:ffff::', family: 'IPv6', mac: '00:00:00:00:00:01', internal: false, cidr: '2a01:4f8::2/64', scopeid: 0 }],
    });
    expect(refusalReason('93.184.216.34')).toBe("this host's own");
    expect(refusalReason('::ffff:93.184.216.34')).toBe("this host's own");
    expect(refusalReason('2a01:4f8::2')).toBe("this host's own");
    expect(refusalReason('93.184.216.35')).toBeNull();
  });
});

describe('every check uses the classifier and names the host, never its address', () => {
  const policy = DomainPolicyFile.parse({});
  const strict = { allowPrivateNetworks: false };

  test.each(['http://192.0.2.2/', 'http://198.18.0.1/', 'http://[::ffff:0:127.0.0.1]/', 'http://[2001:db8::1]/', 'http://[64:ff9b::10.0.0.1]/', 'http://240.0.0.1/', 'http://255.255.255.255/'])(
    'the domain policy refuses %s',
    (url) => {
      expect(evaluateTarget(policy, url, strict)).toMatchObject({ allowed: false, reason: 'private_network' });
    },
  );

  test('with private networks allowed, the same targets pass', () => {
    expect(evaluateTarget(policy, 'http://192.0.2.2/', { allowPrivateNetworks: true })).toEqual({ allowed: true });
  });

  test('the solver refuses a literal special-purpose target, naming only the host', async () => {
    await expect(assertTargetAllowed('http://[::ffff:0:127.0.0.1]:8080/', strict)).rejects.toMatchObject({ type: 'target_blocked', message: 'refused to connect to ::ffff:0:7f00:1: loopback addresses are not allowed' });
    await expect(assertTargetAllowed('http://198.51.100.7/', strict)).rejects.toMatchObject({ type: 'target_blocked' });
  });
});
