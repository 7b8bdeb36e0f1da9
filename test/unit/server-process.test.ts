import { spawnServer } from '../../src/embedded/server-process';

describe('an embedded server process', () => {
  test('a crash keeps both the cause printed first and the end of a long trace for the error message', async () => {
    // As a Go panic: the cause, then hundreds of trace lines, on stderr.
    const script = `
      process.stderr.write('panic: listen tcp 127.0.0.1:41234: bind: address already in use\\n');
      for (let i = 0; i < 400; i++) process.stderr.write('goroutine frame ' + i + ' /some/long/path/to/a/source/file.go:' + i + ' +0x1b9\\n');
      process.stderr.write('main.main() end of trace\\n', () => process.exit(2));`;
    const server = spawnServer(process.execPath, ['-e', script], { stopSignal: 'SIGTERM' });
    await expect(server.exited).rejects.toThrow(/code 2/);
    const output = server.output();
    expect(output).toContain('panic: listen tcp 127.0.0.1:41234: bind: address already in use');
    expect(output).toContain('main.main() end of trace');
    // Bounded: the middle of the trace is left out.
    expect(output.length).toBeLessThan(20_000);
    expect(output).not.toContain('goroutine frame 200 ');
  });

  test('stop asks the server to shut down and resolves when it has exited', async () => {
    const server = spawnServer(process.execPath, ['-e', `process.on('SIGTERM', () => process.exit(0)); setInterval(() => {}, 1000); console.log('up');`], { stopSignal: 'SIGTERM' });
    await new Promise((resolve) => server.child.stdout!.once('data', resolve));
    await server.stop();
    // 0 only from its own handler: killed by the signal, it would have no exit code.
    expect(server.child.exitCode).toBe(0);
  });
});
