/**
 * A strict reader of the Prometheus text exposition format (version 0.0.4), as a scraping server reads
 * it: every sample line parses, belongs to a family declared by `# TYPE`, and has a numeric value.
 */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Exposition {
  types: Map<string, string>;
  samples: Sample[];
}

const NAME = '[a-zA-Z_:][a-zA-Z0-9_:]*';
const SAMPLE_LINE = new RegExp(`^(${NAME})(?:\\{(.*)\\})? (\\S+)(?: (-?\\d+))?$`);
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)/y;
const SUFFIXES: Record<string, string[]> = { histogram: ['_bucket', '_sum', '_count'], summary: ['', '_sum', '_count'], counter: [''], gauge: [''], untyped: [''] };

function parseLabels(text: string, line: string): Record<string, string> {
  const labels: Record<string, string> = {};
  LABEL.lastIndex = 0;
  while (LABEL.lastIndex < text.length) {
    const match = LABEL.exec(text);
    if (!match) throw new Error(`malformed labels in: ${line}`);
    labels[match[1]!] = match[2]!.replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\');
  }
  return labels;
}

// A sample's value is what Go's strconv.ParseFloat reads (the text format's rule): its special values in
// any case, as prom-client writes NaN ("Nan": an event-loop lag with no samples yet).
function parseValue(text: string, line: string): number {
  const special = text.toLowerCase();
  if (special === '+inf' || special === 'inf' || special === '+infinity' || special === 'infinity') return Infinity;
  if (special === '-inf' || special === '-infinity') return -Infinity;
  if (special === 'nan') return NaN;
  const value = Number(text);
  if (Number.isNaN(value)) throw new Error(`not a number in: ${line}`);
  return value;
}

export function parsePrometheusText(text: string): Exposition {
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    if (line.startsWith('#')) {
      const type = /^# TYPE (\S+) (counter|gauge|histogram|summary|untyped)$/.exec(line);
      if (type) types.set(type[1]!, type[2]!);
      else if (!/^# HELP \S+ /.test(line) && !/^# /.test(line)) throw new Error(`malformed comment: ${line}`);
      continue;
    }
    const match = SAMPLE_LINE.exec(line);
    if (!match) throw new Error(`malformed sample: ${line}`);
    const [, name, labelText, valueText] = match;
    const family = [...types.entries()].find(([family, type]) => (SUFFIXES[type] ?? ['']).some((suffix) => `${family}${suffix}` === name));
    if (!family) throw new Error(`sample of an undeclared family: ${line}`);
    samples.push({ name: name!, labels: labelText ? parseLabels(labelText, line) : {}, value: parseValue(valueText!, line) });
  }
  return { types, samples };
}

/** The value of the one sample with this name whose labels include `labels`, 0 when there is none. */
export function sampleValue(exposition: Exposition, name: string, labels: Record<string, string> = {}): number {
  const found = exposition.samples.filter((sample) => sample.name === name && Object.entries(labels).every(([key, value]) => sample.labels[key] === value));
  if (found.length > 1) throw new Error(`${found.length} samples of ${name} match ${JSON.stringify(labels)}`);
  return found[0]?.value ?? 0;
}
