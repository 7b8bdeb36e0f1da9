// The API, with the key kept in this tab's session storage (never a cookie: no cross-site request can use it).

const STORE = 'market-console-session';

export function session() {
  try {
    return JSON.parse(sessionStorage.getItem(STORE) ?? 'null');
  } catch {
    return null;
  }
}

export function signIn(role, key) {
  sessionStorage.setItem(STORE, JSON.stringify({ role, key }));
}

export function signOut() {
  sessionStorage.removeItem(STORE);
}

function authHeaders() {
  const current = session();
  if (!current) return {};
  return current.role === 'operator' ? { 'X-Admin-API-Key': current.key } : { Authorization: `Bearer ${current.key}` };
}

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message ?? `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

/** One API call; JSON in and out; a non-2xx answer throws ApiError with its body. */
export async function call(method, path, body, headers = {}) {
  const response = await fetch(path, {
    method,
    headers: { ...authHeaders(), ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}), ...headers },
    body: body !== undefined ? JSON.stringify(body) : undefined,
    credentials: 'omit',
    cache: 'no-store',
  });
  const text = await response.text();
  let json;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  if (!response.ok) throw new ApiError(response.status, json);
  return json;
}

export const get = (path) => call('GET', path);

export function query(params) {
  const entries = Object.entries(params).filter(([, value]) => value !== undefined && value !== null && value !== '');
  return entries.length ? `?${new URLSearchParams(entries)}` : '';
}

/**
 * Follows GET /v1/admin/events (server-sent events, read with fetch so that the key travels in a
 * header), calling onEvent(name, data) for each; reconnects after a drop until stop() is called.
 */
export function followEvents(onEvent, onState = () => {}) {
  const controller = new AbortController();
  let stopped = false;
  (async () => {
    while (!stopped) {
      try {
        const response = await fetch('/v1/admin/events', { headers: { ...authHeaders(), Accept: 'text/event-stream' }, signal: controller.signal, credentials: 'omit', cache: 'no-store' });
        if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
        onState('live');
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let end;
          while ((end = buffer.indexOf('\n\n')) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            let name = 'message';
            const data = [];
            for (const line of block.split('\n')) {
              if (line.startsWith('event:')) name = line.slice(6).trim();
              else if (line.startsWith('data:')) data.push(line.slice(5).trimStart());
            }
            if (data.length) onEvent(name, JSON.parse(data.join('\n')));
          }
        }
      } catch (error) {
        if (stopped) return;
      }
      if (stopped) return;
      onState('reconnecting');
      await new Promise((resolve) => setTimeout(resolve, 2000));
    }
  })();
  return () => {
    stopped = true;
    controller.abort();
  };
}
