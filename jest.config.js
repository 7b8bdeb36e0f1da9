/**
 * Four projects: `unit` tests need no servers, start no other program and build nothing
 * (`npm run test:unit`, seconds); `browser` tests drive a real Chromium through the bundled solver's
 * browser pool; `workflows` tests bundle the workflow code (webpack, several seconds), replay
 * recorded histories on it and run the task workflow's branches on the time-skipping test server
 * (no PostgreSQL); `integration` tests run against a real embedded PostgreSQL and a real
 * Temporal dev server started once by globalSetup. `npm test` runs all four.
 */
const BROWSER_TESTS = '<rootDir>/test/solver/browser-*.test.ts';

const shared = {
  testEnvironment: 'node',
  transform: { '^.+\\.(t|j)sx?$': ['@swc/jest'] },
  // A few dependencies ship only ES modules; let swc turn them into CommonJS like our own code.
  transformIgnorePatterns: ['/node_modules/(?!(p-limit|yocto-queue|serialize-error|type-fest|p-queue|eventemitter3|p-timeout|css-select|css-what|nth-check|boolbase|domutils|dom-serializer|domhandler|domelementtype|entities)/)'],
};

module.exports = {
  testTimeout: 60000,
  // Each integration file leaves its modules (and what they hold) on the heap, tens of MB a file: one
  // process running every file grows past 4 GB and spends its time collecting. A worker whose heap passes
  // this after a file is replaced before its next one (`npm test` runs two workers).
  workerIdleMemoryLimit: '1.5GB',
  // The longest files first, also on a checkout where Jest has no timings of its own (CI's).
  testSequencer: '<rootDir>/test/support/sequencer.js',
  projects: [
    {
      ...shared,
      displayName: 'unit',
      roots: ['<rootDir>/test'],
      testMatch: ['<rootDir>/test/{unit,solver,policy,safety,compat}/**/*.test.ts'],
      testPathIgnorePatterns: ['/node_modules/', '/test/solver/browser-'],
    },
    {
      ...shared,
      displayName: 'browser',
      roots: ['<rootDir>/test'],
      testMatch: [BROWSER_TESTS],
    },
    {
      ...shared,
      displayName: 'workflows',
      roots: ['<rootDir>/test'],
      testMatch: ['<rootDir>/test/workflows/**/*.test.ts'],
    },
    {
      ...shared,
      displayName: 'integration',
      roots: ['<rootDir>/test'],
      testMatch: ['<rootDir>/test/*.test.ts'],
      globalSetup: '<rootDir>/test/support/global-setup.ts',
      setupFiles: ['<rootDir>/test/support/isolate-file.ts'],
      globalTeardown: '<rootDir>/test/support/global-teardown.ts',
    },
  ],
};
