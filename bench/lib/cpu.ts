import fs from 'node:fs';

/**
 * CPU time (user + system) of this process and its descendants, grouped: which process pays for a
 * figure tells where to cut. Linux only (reads /proc); elsewhere every group reads 0.
 */
export type CpuGroups = Record<string, number>;

const TICKS_PER_SECOND = 100; // USER_HZ on Linux

interface Proc {
  pid: number;
  ppid: number;
  comm: string;
  cpuMs: number;
}

function readProcs(): Proc[] {
  let entries: string[];
  try {
    entries = fs.readdirSync('/proc').filter((name) => /^\d+$/.test(name));
  } catch {
    return [];
  }
  const procs: Proc[] = [];
  for (const name of entries) {
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
      // The command name is in parentheses and may itself hold spaces or parentheses.
      const close = stat.lastIndexOf(')');
      const comm = stat.slice(stat.indexOf('(') + 1, close);
      const fields = stat.slice(close + 2).split(' ');
      // Its own time and that of the children it has reaped (PostgreSQL's backends that closed meanwhile).
      const ticks = Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14]);
      procs.push({ pid: Number(name), ppid: Number(fields[1]), comm, cpuMs: (ticks * 1000) / TICKS_PER_SECOND });
    } catch {
      // The process exited meanwhile.
    }
  }
  return procs;
}

/** CPU ms so far per group: named pids (the API, the worker), then `temporal`, `postgres`, and `bench` (this process). */
export function cpuSnapshot(named: Record<string, number | undefined>): CpuGroups {
  const procs = readProcs();
  const children = new Map<number, Proc[]>();
  for (const proc of procs) children.set(proc.ppid, [...(children.get(proc.ppid) ?? []), proc]);
  const byPid = new Map(Object.entries(named).flatMap(([group, pid]) => (pid ? [[pid, group] as const] : [])));
  const groups: CpuGroups = {};
  const walk = (pid: number) => {
    for (const proc of children.get(pid) ?? []) {
      const group = byPid.get(proc.pid) ?? (/temporal/.test(proc.comm) ? 'temporal' : /postgres/.test(proc.comm) ? 'postgres' : 'other');
      groups[group] = (groups[group] ?? 0) + proc.cpuMs;
      walk(proc.pid);
    }
  };
  walk(process.pid);
  const self = procs.find((proc) => proc.pid === process.pid);
  groups.bench = self?.cpuMs ?? 0;
  return groups;
}

/** CPU ms each group spent between two snapshots. */
export function cpuSpent(before: CpuGroups, after: CpuGroups): CpuGroups {
  return Object.fromEntries(Object.keys(after).map((group) => [group, after[group] - (before[group] ?? 0)]));
}

/** CPU ms per call between two snapshots, rounded to 0.1 ms. */
export function cpuPerCall(before: CpuGroups, after: CpuGroups, calls: number): CpuGroups {
  const out: CpuGroups = {};
  let total = 0;
  for (const group of Object.keys(after)) {
    const ms = (after[group] - (before[group] ?? 0)) / Math.max(1, calls);
    total += ms;
    out[group] = Math.round(ms * 10) / 10;
  }
  out.total = Math.round(total * 10) / 10;
  return out;
}
