/** Solver tests only: no Postgres or Temporal needed. */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/solver/**/*.test.ts'],
  transform: { '^.+\\.(t|j)sx?$': ['@swc/jest'] },
  // linkedom's selector engine (css-select and its helpers) ships as ES modules only; Jest needs them as CommonJS.
  transformIgnorePatterns: ['/node_modules/(?!(css-select|css-what|nth-check|boolbase|domutils|dom-serializer|domhandler|domelementtype|entities)/)'],
  testTimeout: 60000,
};
