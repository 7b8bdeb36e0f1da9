/** Tests run against a real embedded PostgreSQL and a real Temporal dev server started by globalSetup. */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: { '^.+\\.(t|j)sx?$': ['@swc/jest'] },
  // A few dependencies ship only ES modules; let swc turn them into CommonJS like our own code.
  transformIgnorePatterns: ['/node_modules/(?!(p-limit|yocto-queue|serialize-error|type-fest|p-queue|eventemitter3|p-timeout|css-select|css-what|nth-check|boolbase|domutils|dom-serializer|domhandler|domelementtype|entities)/)'],
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  globalTeardown: '<rootDir>/test/support/global-teardown.ts',
  testTimeout: 60000,
};
