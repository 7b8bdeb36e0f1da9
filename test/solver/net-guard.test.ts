import dns from 'node:dns';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { assertTargetAllowed, guardedLookup, pinnedLookup } from '../../src/solver/net-guard';
import { SolverError } from '../../src/solver/errors';

test('refuses a host name that resolves to loopback', async () => {
  const refused = assertTargetAllowed('http://localhost:8080/', { allowPrivateNetworks: false });
  // The message names the host, never what it resolves to.
  await expect(refused).rejects.toMatchObject({ type: 'target_blocked', message: 'refused to connect to localhost: loopback addresses are not allowed' });
});

test('admits private targets when private networks are allowed', async () => {
  await expect(assertTargetAllowed('http://127.0.0.1:8080/x', { allowPrivateNetworks: true })).resolves.toBeInstanceOf(URL);
});

test('refuses non-http schemes even when private networks are allowed', async () => {
  for (const url of ['file:///etc/passwd', 'ftp://example.com/', 'gopher://127.0.0.1/', 'data:text/html,hi']) {
    await expect(assertTargetAllowed(url, { allowPrivateNetworks: true })).rejects.toMatchObject({ type: 'target_blocked' });
  }
});

test('the guarded lookup refuses the connection itself', async () => {
  const error = await new Promise<unknown>((resolve) => {
    const request = http.get({ host: 'localhost', port: 9, lookup: guardedLookup({ allowPrivateNetworks: false }) as never }, () => resolve(null));
    request.on('error', resolve);
  });
  expect(error).toBeInstanceOf(SolverError);
  expect(error).toMatchObject({ type: 'target_blocked' });
});

test('the pinned lookup connects to the checked address without asking DNS, and keeps the name as Host', async () => {
  const server = http.createServer((req, res) => res.end(req.headers.host));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  const asked = jest.spyOn(dns, 'lookup');
  const get = (family?: number) =>
    new Promise<string>((resolve, reject) => {
      const request = http.get({ host: 'never-resolved.invalid', port, family, agent: false, lookup: pinnedLookup([{ address: '127.0.0.1', family: 4 }]) as never }, (response) => {
        let body = '';
        response.on('data', (chunk) => (body += chunk)).on('end', () => resolve(body));
      });
      request.on('error', reject);
    });
  try {
    expect(await get()).toBe(`never-resolved.invalid:${port}`);
    // Only IPv4 was checked: an IPv6-only connection has nowhere to go.
    await expect(get(6)).rejects.toMatchObject({ code: 'ENOTFOUND' });
    expect(asked).not.toHaveBeenCalled();
  } finally {
    asked.mockRestore();
    server.close();
  }
});
