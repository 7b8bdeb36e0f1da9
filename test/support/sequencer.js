const path = require('node:path');
const Sequencer = require('@jest/test-sequencer').default;

/**
 * Jest starts the files it has seen take longest first, so that no worker is left with a long file at
 * the end. It knows only the durations of its own earlier runs here: on a fresh checkout (CI's) it falls
 * back to file size, which started the screenshot comparisons (about a minute) in the last minute of the
 * run. These files' seconds in a two-worker `npm test` on the 2-core development machine stand in until
 * Jest has timings of its own; only their order matters. Every other file counts as shorter than these.
 * test/solver/browser-settle.test.ts (about 30 s) is left to size order: its stalled page's check is bound
 * by time, and placed by this list it ran beside another file driving Chromium (the rendered scrapes)
 * and missed the page's late text in two runs of four.
 */
const SECONDS_IN_A_FULL_RUN = {
  'test/trust-honest.test.ts': 166,
  'test/verification.test.ts': 101,
  'test/crawl-crash.test.ts': 94,
  'test/work-sharing.test.ts': 85,
  'test/multi-process.test.ts': 77,
  'test/fuzz.test.ts': 65,
  'test/screenshot-similarity.test.ts': 63,
  'test/crawl.test.ts': 56,
  'test/webhooks.test.ts': 40,
  'test/chat-audit.test.ts': 39,
  'test/console.test.ts': 38,
  'test/compat-rendered-scrape.test.ts': 32,
  'test/readme.test.ts': 32,
  'test/trust.test.ts': 27,
  'test/crash-drill.test.ts': 27,
  'test/chat.test.ts': 25,
  'test/solver/browser-tasks.test.ts': 24,
  'test/chat-verification.test.ts': 23,
  'test/two-stacks.test.ts': 23,
  'test/tasks.test.ts': 22,
};

const ROOT = path.resolve(__dirname, '../..');

class LongestFirst extends Sequencer {
  time(test) {
    const seconds = SECONDS_IN_A_FULL_RUN[path.relative(ROOT, test.path).split(path.sep).join('/')];
    // A file with neither: by size, as Jest does, below every file listed (a byte counts as a microsecond).
    return super.time(test) ?? (seconds === undefined ? this.size(test) / 1000 : seconds * 1000);
  }

  size(test) {
    return test.context.hasteFS.getSize(test.path) ?? 0;
  }
}

module.exports = LongestFirst;
