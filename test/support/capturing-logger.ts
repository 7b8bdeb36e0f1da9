import { Writable } from 'node:stream';
import pino from 'pino';

/** A logger whose output the test can read (to prove what is and is not logged). */
export function capturingLogger(level = 'info') {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _encoding, callback) {
      lines.push(chunk.toString());
      callback();
    },
  });
  return { logger: pino({ level }, stream), lines };
}
