import { createProxyFetchHandler } from '../../src/solver/handlers/proxy-fetch';
import { SolverError } from '../../src/solver/errors';
import { FetchResult } from '../../src/schemas/frames';
import { startFixtureServer, type FixtureServer } from './helpers/fixture-server';

let server: FixtureServer;
const signal = () => new AbortController().signal;
const fetchPage = createProxyFetchHandler({ policy: { allowPrivateNetworks: true }, maxBytes: 256 * 1024, timeoutMs: 10_000 });

beforeAll(async () => {
  server = await startFixtureServer();
});
afterAll(() => server.close());

async function failure(promise: Promise<unknown>): Promise<SolverError> {
  try {
    await promise;
  } catch (error) {
    return error as SolverError;
  }
  throw new Error('expected the handler to fail');
}

test('returns markdown of the main content with the heading and absolute links', async () => {
  const result = await fetchPage({ url: `${server.baseUrl}/article.html` }, { signal: signal() });
  expect(FetchResult.parse(result)).toBeTruthy();
  expect(result).toMatchObject({ status_code: 200, content_type: 'markdown', title: 'Fixture Article', final_url: `${server.baseUrl}/article.html` });
  const content = result.content as string;
  expect(content).toContain('The Fixture Heading');
  expect(content).toContain(`[the relative guide](${server.baseUrl}/docs/guide.html)`);
  expect(content).toContain('(https://example.org/elsewhere)');
  expect(content).toContain(`![the logo](${server.baseUrl}/images/logo.png)`);
  expect(content).toContain('| Task | Path |');
  expect(content).not.toContain('window.tracking');
});

test('returns the raw HTML when raw_html is true', async () => {
  const result = await fetchPage({ url: `${server.baseUrl}/article.html`, raw_html: true }, { signal: signal() });
  expect(result.content_type).toBe('html');
  expect(result.content).toContain('<script>window.tracking = true;</script>');
  expect(result.title).toBe('Fixture Article');
});

test('follows redirects and reports the final URL', async () => {
  const result = await fetchPage({ url: `${server.baseUrl}/redirect/3` }, { signal: signal() });
  expect(result.url).toBe(`${server.baseUrl}/redirect/3`);
  expect(result.final_url).toBe(`${server.baseUrl}/article.html`);
  expect(result.content).toContain('The Fixture Heading');
});

test('gives up after ten redirects', async () => {
  const error = await failure(fetchPage({ url: `${server.baseUrl}/loop` }, { signal: signal() }));
  expect(error).toMatchObject({ type: 'too_many_redirects', retryable: false });
});

test('decodes an ISO-8859-1 page declared in the Content-Type header', async () => {
  const result = await fetchPage({ url: `${server.baseUrl}/latin1.html` }, { signal: signal() });
  expect(result.title).toBe('Café crème');
  expect(result.content).toContain('Déjà vu à la française, naïve.');
});

test('decodes an ISO-8859-1 page declared only in a meta tag', async () => {
  const result = await fetchPage({ url: `${server.baseUrl}/latin1-meta.html` }, { signal: signal() });
  expect(result.content).toContain('Café crème brûlée');
});

test('decompresses gzip bodies', async () => {
  const result = await fetchPage({ url: `${server.baseUrl}/gzip.html` }, { signal: signal() });
  expect(result.content).toContain('The Fixture Heading');
});

test('refuses bodies over the size cap', async () => {
  const error = await failure(fetchPage({ url: `${server.baseUrl}/big.html?bytes=${300 * 1024}` }, { signal: signal() }));
  expect(error).toMatchObject({ type: 'response_too_large', retryable: false });
});

test('returns non-HTML text bodies as they are', async () => {
  const text = await fetchPage({ url: `${server.baseUrl}/notes.txt` }, { signal: signal() });
  expect(text).toMatchObject({ content: 'Plain notes.\nSecond line with ünïcode.\n', title: null });
  const json = await fetchPage({ url: `${server.baseUrl}/data.json` }, { signal: signal() });
  expect(json.content).toBe('{"hello":"world"}');
});

test('refuses binary bodies', async () => {
  const error = await failure(fetchPage({ url: `${server.baseUrl}/image.png` }, { signal: signal() }));
  expect(error).toMatchObject({ type: 'unsupported_content', retryable: false });
});

test('passes the status code of error pages through', async () => {
  const result = await fetchPage({ url: `${server.baseUrl}/missing` }, { signal: signal() });
  expect(result).toMatchObject({ status_code: 404, title: 'Not here' });
});

test('a server that refuses the connection is connection_refused, not retried (the target failed)', async () => {
  const error = await failure(fetchPage({ url: 'http://127.0.0.1:9/' }, { signal: signal() }));
  expect(error).toMatchObject({ type: 'connection_refused', retryable: false });
});

test('refuses private targets unless private networks are allowed', async () => {
  const guarded = createProxyFetchHandler({ policy: { allowPrivateNetworks: false }, maxBytes: 1024, timeoutMs: 5_000 });
  for (const url of [`${server.baseUrl}/article.html`, `http://localhost:${server.port}/`, 'http://169.254.169.254/latest/meta-data/', 'http://[::1]/', 'http://10.0.0.1/']) {
    const error = await failure(guarded({ url }, { signal: signal() }));
    expect(error).toMatchObject({ type: 'target_blocked', retryable: false });
  }
});

test('refuses schemes other than http and https', async () => {
  const error = await failure(fetchPage({ url: 'file:///etc/passwd' }, { signal: signal() }));
  expect(error.type).toBe('target_blocked');
});

test('rejects an invalid payload', async () => {
  const error = await failure(fetchPage({ raw_html: true }, { signal: signal() }));
  expect(error).toMatchObject({ type: 'invalid_payload', retryable: false });
});

test('stops when the attempt is aborted', async () => {
  const controller = new AbortController();
  const pending = fetchPage({ url: `${server.baseUrl}/hang` }, { signal: controller.signal });
  controller.abort(new SolverError('cancelled', 'cancelled by test'));
  const error = await failure(pending);
  expect(error.type).toBe('cancelled');
});

test('times out after the payload timeout', async () => {
  const error = await failure(fetchPage({ url: `${server.baseUrl}/hang`, timeout: 1 }, { signal: signal() }));
  expect(error).toMatchObject({ type: 'timeout', retryable: true });
});
