/** The `data` payloads of a server-sent-event stream, one per event, in order. */
export async function* readSseData(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buffer = '';
  const reader = body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
      // A lone trailing \r may be the first half of \r\n: keep it until the next chunk.
      const settled = done ? buffer : buffer.replace(/\r$/, '');
      const normalized = settled.replace(/\r\n?/g, '\n');
      const events = normalized.split('\n\n');
      const rest = done ? '' : events.pop()!;
      buffer = rest + buffer.slice(settled.length);
      for (const event of events) {
        const data = dataOf(event);
        if (data !== null) yield data;
      }
      if (done) return;
    }
  } finally {
    reader.releaseLock();
  }
}

function dataOf(event: string): string | null {
  const lines = event
    .split('\n')
    .filter((line) => line.startsWith('data:'))
    .map((line) => line.slice(5).replace(/^ /, ''));
  return lines.length > 0 ? lines.join('\n') : null;
}
