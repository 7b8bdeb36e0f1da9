import { sdkLogLevel } from '../../src/temporal/runtime';

describe('the Temporal SDK log levels', () => {
  test('warnings that describe how the service works are logged at debug; every other message keeps its level', () => {
    expect(sdkLogLevel('WARN', 'No workflows registered, not polling for workflow tasks')).toBe('debug');
    expect(
      sdkLogLevel('WARN', 'Activity not found on completion. This may happen if the activity has already been cancelled but completed anyway.'),
    ).toBe('debug');
    expect(sdkLogLevel('WARN', 'Failed to poll for activity task')).toBe('warn');
    expect(sdkLogLevel('ERROR', 'Activity not found on completion')).toBe('debug');
    expect(sdkLogLevel('ERROR', 'Worker failed')).toBe('error');
    expect(sdkLogLevel('INFO', 'Worker started')).toBe('debug');
  });
});
