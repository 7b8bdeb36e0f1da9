import { RecentPayloads } from '../../src/tasks/recent-payloads';

describe('RecentPayloads', () => {
  test('hands each payload out once', () => {
    const payloads = new RecentPayloads();
    payloads.remember('task_a', { url: 'https://a.example' });
    expect(payloads.take('task_a')).toEqual({ url: 'https://a.example' });
    expect(payloads.take('task_a')).toBeUndefined();
    expect(payloads.take('task_unknown')).toBeUndefined();
  });

  test('keeps only the newest entries up to its capacity', () => {
    const payloads = new RecentPayloads(2);
    payloads.remember('task_1', { n: 1 });
    payloads.remember('task_2', { n: 2 });
    payloads.remember('task_3', { n: 3 });
    expect(payloads.take('task_1')).toBeUndefined();
    expect(payloads.take('task_2')).toEqual({ n: 2 });
    expect(payloads.take('task_3')).toEqual({ n: 3 });
  });
});
