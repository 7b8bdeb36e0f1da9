import crypto from 'node:crypto';
import { MONTHS } from './canary-pages';

/**
 * The questions chat audits ask (docs/trust.md, "Chat audits"): generated from a seed, in prose, with
 * values that are often written in words and with distractors beside them, so that the answer takes
 * reading the text, not parsing it; yet the service knows each answer without a model. Four kinds:
 * a word problem of several steps, a fact planted in a long generated context, an instruction with
 * checkable constraints, and an extraction into a strict JSON schema. Pure functions: the same seed
 * gives the same question and answer.
 */

/** A deterministic generator (sfc32) seeded from a string's SHA-256: a question is reproduced from its seed. */
export class Rng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(seed: string) {
    const digest = crypto.createHash('sha256').update(seed).digest();
    [this.a, this.b, this.c, this.d] = [0, 4, 8, 12].map((offset) => digest.readUInt32LE(offset)) as [
      number,
      number,
      number,
      number,
    ];
    for (let i = 0; i < 12; i++) this.next();
  }

  /** Uniform in [0, 1). */
  next(): number {
    const t = (((this.a + this.b) | 0) + this.d) | 0;
    this.d = (this.d + 1) | 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) | 0;
    this.c = (this.c << 21) | (this.c >>> 11);
    this.c = (this.c + t) | 0;
    return (t >>> 0) / 4294967296;
  }

  /** An integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.next() * items.length)]!;
  }

  /** `count` distinct items, in a random order. */
  sample<T>(items: readonly T[], count: number): T[] {
    return this.shuffle(items).slice(0, count);
  }

  shuffle<T>(items: readonly T[]): T[] {
    const copy = [...items];
    for (let i = copy.length - 1; i > 0; i--) {
      const j = Math.floor(this.next() * (i + 1));
      [copy[i], copy[j]] = [copy[j]!, copy[i]!];
    }
    return copy;
  }
}

const ONES = [
  'zero',
  'one',
  'two',
  'three',
  'four',
  'five',
  'six',
  'seven',
  'eight',
  'nine',
  'ten',
  'eleven',
  'twelve',
  'thirteen',
  'fourteen',
  'fifteen',
  'sixteen',
  'seventeen',
  'eighteen',
  'nineteen',
];
const TENS = ['', '', 'twenty', 'thirty', 'forty', 'fifty', 'sixty', 'seventy', 'eighty', 'ninety'];

/** A whole number from 0 to 999,999 in English words ("three hundred and forty-two"). */
export function numberWords(n: number): string {
  if (n < 20) return ONES[n]!;
  if (n < 100) return TENS[Math.floor(n / 10)]! + (n % 10 ? `-${ONES[n % 10]}` : '');
  if (n < 1000) return `${ONES[Math.floor(n / 100)]} hundred${n % 100 ? ` and ${numberWords(n % 100)}` : ''}`;
  return `${numberWords(Math.floor(n / 1000))} thousand${n % 1000 ? `${n % 1000 < 100 ? ' and' : ''} ${numberWords(n % 1000)}` : ''}`;
}

/** A number as the prose gives it: in words at times (the chance given), in digits otherwise. */
const say = (rng: Rng, n: number, words = 0.4) => (rng.chance(words) ? numberWords(n) : String(n));

const FIRST_NAMES = [
  'Priya',
  'Tomasz',
  'Amara',
  'Lukas',
  'Mei',
  'Diego',
  'Fatima',
  'Oskar',
  'Ingrid',
  'Kwame',
  'Sofia',
  'Rahul',
  'Hana',
  'Mateo',
  'Olga',
  'Emeka',
  'Yusuf',
  'Clara',
  'Jonas',
  'Aiko',
  'Bruno',
  'Leila',
  'Niamh',
  'Pavel',
  'Rosa',
  'Tariq',
  'Elif',
  'Marcus',
  'Sunita',
  'Viktor',
  'Zainab',
  'Hugo',
  'Greta',
  'Kenji',
  'Adaeze',
  'Felix',
];
const LAST_NAMES = [
  'Okafor',
  'Nowak',
  'Lindqvist',
  'Moreau',
  'Tanaka',
  'Alvarez',
  'Haddad',
  'Brennan',
  'Kowalski',
  'Mensah',
  'Rossi',
  'Sharma',
  'Novak',
  'Costa',
  'Ivanova',
  'Adeyemi',
  'Fischer',
  'Yilmaz',
  'Berg',
  'Suzuki',
  'Dubois',
  'Khan',
  'Walsh',
  'Petrov',
  'Silva',
  'Jensen',
  'Osei',
  'Romero',
  'Weber',
  'Larsen',
];
const CITIES = [
  'Leeds',
  'Porto',
  'Gdansk',
  'Lyon',
  'Osaka',
  'Valencia',
  'Tampere',
  'Accra',
  'Bergen',
  'Graz',
  'Cork',
  'Brno',
  'Malmo',
  'Turin',
  'Ghent',
  'Nantes',
  'Bilbao',
  'Aarhus',
  'Kaunas',
  'Split',
];
const DAYS = ['Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday', 'Sunday'];

const personName = (rng: Rng) => `${rng.pick(FIRST_NAMES)} ${rng.pick(LAST_NAMES)}`;
/** `count` people with distinct first names, so that a first name alone names one of them. */
const people = (rng: Rng, count: number) =>
  rng.sample(FIRST_NAMES, count).map((first) => `${first} ${rng.pick(LAST_NAMES)}`);

/** Where a question's setting comes from: who keeps the stock and what it counts. */
const SETTINGS = [
  {
    place: 'the bakery',
    unit: 'bags of flour',
    one: 'bag',
    group: 'deliveries',
    use: 'were baked into bread',
    send: 'sent to the market stall',
  },
  {
    place: 'the warehouse',
    unit: 'boxes',
    one: 'box',
    group: 'pallets',
    use: 'were shipped to customers',
    send: 'moved to the overflow depot',
  },
  {
    place: 'the school lab',
    unit: 'test tubes',
    one: 'tube',
    group: 'crates',
    use: 'were broken during practicals',
    send: 'lent to the other campus',
  },
  {
    place: 'the food bank',
    unit: 'food parcels',
    one: 'parcel',
    group: 'van loads',
    use: 'were handed out',
    send: 'passed on to the night shelter',
  },
  {
    place: 'the print shop',
    unit: 'reams of paper',
    one: 'ream',
    group: 'cartons',
    use: 'went into flyer jobs',
    send: 'returned to the supplier',
  },
  {
    place: 'the garden centre',
    unit: 'seedlings',
    one: 'seedling',
    group: 'trays',
    use: 'were sold',
    send: 'planted out in the community plot',
  },
  {
    place: 'the bike workshop',
    unit: 'inner tubes',
    one: 'tube',
    group: 'boxes',
    use: "were fitted to customers' bikes",
    send: 'sent to the repair cafe',
  },
  {
    place: 'the library',
    unit: 'books',
    one: 'book',
    group: 'donation boxes',
    use: 'were lent out',
    send: 'sent to the branch library',
  },
  {
    place: 'the hostel',
    unit: 'towels',
    one: 'towel',
    group: 'laundry bags',
    use: 'went to the wash',
    send: 'moved to the annex',
  },
  {
    place: 'the cafe',
    unit: 'bags of coffee beans',
    one: 'bag',
    group: 'sacks',
    use: 'were ground and brewed',
    send: 'taken to the pop-up stand',
  },
] as const;

/** Facts with numbers that do not bear on the question. */
const DISTRACTORS = [
  '{name} drove {n} kilometres to collect them.',
  'Each {one} costs {n} points, though nobody asked about money.',
  '{place} has {n} people on the rota this week.',
  'It was {n} degrees outside, which {name} complained about.',
  'A customer asked about {n} {other} but bought none.',
  'The delivery van is {n} years old.',
  '{name} has worked at {place} for {n} months.',
  'The phone rang {n} times that morning.',
  'The spare room next door holds {n} chairs.',
  '{name} mentioned that last year they had {n} {unit} at this point.',
];
const OTHERS = ['umbrellas', 'postcards', 'candles', 'batteries', 'keyrings', 'mugs'];

export interface WordProblem {
  prose: string;
  question: string;
  answer: number;
}

/**
 * A stock that changes over a few days (deliveries of groups, uses, a share sent away, returns), with
 * distractors; the question asks what is left at the end, or how it changed. Every step keeps the
 * count a whole positive number.
 */
export function wordProblem(rng: Rng): WordProblem {
  const s = rng.pick(SETTINGS);
  const names = people(rng, 3).map((name) => name.split(' ')[0]!);
  const fill = (template: string, n: number) =>
    template.replace(
      /\{(\w+)\}/g,
      (_, key: string) =>
        ({ name: rng.pick(names), n: say(rng, n), one: s.one, place: s.place, unit: s.unit, other: rng.pick(OTHERS) })[
          key
        ] ?? '',
    );
  const start = rng.int(20, 400);
  let count = start;
  const days = DAYS.slice(rng.int(0, 2));
  const sentences = [
    rng.pick([
      `At the start of the week ${s.place} had ${say(rng, start)} ${s.unit}.`,
      `On ${days[0]} morning there were ${say(rng, start)} ${s.unit} at ${s.place}.`,
      `${names[0]} counted ${say(rng, start)} ${s.unit} at ${s.place} first thing on ${days[0]}.`,
    ]),
  ];
  const steps = rng.int(3, 5);
  let lastUsed = 0;
  for (let i = 0; i < steps; i++) {
    const day = days[Math.min(i, days.length - 1)]!;
    const options = [
      'groups',
      ...(count >= 3 ? ['use', 'use'] : []),
      ...(count % 2 === 0 || count % 3 === 0 || count % 4 === 0 ? ['share'] : []),
      ...(lastUsed > 2 ? ['return'] : []),
    ];
    const step = rng.pick(options);
    if (step === 'groups') {
      const k = rng.int(2, 6);
      const m = rng.int(3, 24);
      count += k * m;
      sentences.push(
        rng.pick([
          `On ${day}, ${say(rng, k)} ${s.group} arrived with ${say(rng, m)} ${s.unit} in each.`,
          `${names[1]} brought in ${say(rng, k)} ${s.group} on ${day}, each holding ${say(rng, m)} ${s.unit}.`,
        ]),
      );
      lastUsed = 0;
    } else if (step === 'use') {
      const n = rng.int(1, Math.max(1, Math.floor(count * 0.6)));
      count -= n;
      lastUsed = n;
      sentences.push(
        rng.pick([
          `On ${day}, ${say(rng, n)} of the ${s.unit} ${s.use}.`,
          `During ${day} ${say(rng, n)} ${s.unit} ${s.use}.`,
        ]),
      );
    } else if (step === 'share') {
      const [part, word] = rng.pick(
        (
          [
            [2, 'half'],
            [3, 'a third'],
            [4, 'a quarter'],
          ] as const
        ).filter(([d]) => count % d === 0),
      );
      count -= count / part;
      sentences.push(`On ${day}, ${word} of the ${s.unit} then at ${s.place} were ${s.send}.`);
      lastUsed = 0;
    } else {
      const r = rng.int(1, lastUsed - 1);
      count += r;
      sentences.push(
        `Later it turned out that ${say(rng, r)} of the ${s.unit} counted as gone had not been used ` +
          `after all, and they were put back.`,
      );
      lastUsed = 0;
    }
    if (rng.chance(0.6)) sentences.push(fill(rng.pick(DISTRACTORS), rng.int(2, 90)));
  }
  sentences.splice(rng.int(1, sentences.length), 0, fill(rng.pick(DISTRACTORS), rng.int(2, 90)));
  const difference = rng.chance(0.25);
  const question = difference
    ? `By how many ${s.unit} did the count at ${s.place} change from the start to the end of all ` +
      `this? Give the size of the change.`
    : rng.pick([
        `How many ${s.unit} were at ${s.place} at the end?`,
        `How many ${s.unit} does ${s.place} have after all of that?`,
        `What is the final count of ${s.unit} at ${s.place}?`,
      ]);
  return { prose: sentences.join(' '), question, answer: difference ? Math.abs(count - start) : count };
}

/** What the planted facts are about: an attribute each person has, with a number as its value. */
const ATTRIBUTES = [
  {
    name: 'locker number',
    set: '{who} was given locker {v}.',
    change: '{who} later swapped lockers and now uses locker {v}.',
    ask: 'Which locker does {who} use now?',
    near: [
      '{who} asked whether locker {v} was free, but it was taken.',
      '{who} found a lost scarf in locker {v} and handed it in.',
    ],
  },
  {
    name: 'desk number',
    set: '{who} sat at desk {v} at first.',
    change: 'After the reshuffle {who} moved to desk {v} for good.',
    ask: 'At which desk does {who} sit after the reshuffle?',
    near: [
      '{who} helped carry a monitor over to desk {v}.',
      '{who} would have liked desk {v}, by the window, but did not get it.',
    ],
  },
  {
    name: 'phone extension',
    set: "{who}'s extension was {v}.",
    change: "The switchboard changed {who}'s extension to {v}.",
    ask: "What is {who}'s phone extension now?",
    near: ['{who} kept calling extension {v} by mistake.', '{who} noted that extension {v} belongs to the post room.'],
  },
  {
    name: 'parking space',
    set: '{who} parked in space {v}.',
    change: '{who} was then reassigned to parking space {v}.',
    ask: 'Which parking space is {who} assigned to in the end?',
    near: [
      '{who} complained that a van was blocking parking space {v}.',
      '{who} asked for parking space {v}, which went to a visitor instead.',
    ],
  },
  {
    name: 'room',
    set: '{who} was booked into room {v}.',
    change: 'A leak meant {who} was moved to room {v}.',
    ask: 'Which room is {who} in after the move?',
    near: ['{who} reported the leak in room {v} first.', '{who} helped a guest carry bags up to room {v}.'],
  },
] as const;

/** Sentences of a long generated log: who did what, with numbers that are no answer. */
const FILLER = [
  '{who} checked the {thing} in the {place} and noted {n} items that needed attention.',
  'The meeting about the {thing} ran for {n} minutes; {who} took the minutes.',
  '{who} reported that the {thing} near the {place} was working again.',
  'A delivery of {n} {stuff} came in and {who} signed for it.',
  'Someone left {n} {stuff} by the {place}; {who} put them away.',
  '{who} asked whether the {thing} could be moved closer to the {place}.',
  "The weekly count of {stuff} came to {n}, close to last week's.",
  '{who} worked {n} hours on the {thing} this week.',
  'Nothing much happened around the {place} today apart from a fire drill.',
  '{who} and {other} disagreed about the {thing} but settled it over coffee.',
  'Reminder from {who}: the {place} closes early on {day}.',
  'The {thing} was serviced on {day}; the engineer spent {n} minutes on it.',
];
const THINGS = [
  'printer',
  'coffee machine',
  'heating',
  'projector',
  'fridge',
  'shelving',
  'alarm panel',
  'scanner',
  'loading bay door',
  'router',
];
const PLACES = ['kitchen', 'front desk', 'store room', 'east wing', 'car park', 'lobby', 'workshop', 'post room'];
const STUFF = ['envelopes', 'chairs', 'folders', 'cables', 'boxes', 'cups', 'lamps', 'badges'];

export interface PlantedFact {
  context: string;
  question: string;
  answer: number;
}

/**
 * A long generated office log (`targetChars` of it) in which everyone has an attribute (a locker, a
 * desk, …) with a number, and the person asked about has it changed once: the answer is the later
 * value. The person's name also stands beside other numbers, and everyone else's values are other numbers.
 */
export function plantedFact(rng: Rng, targetChars: number): PlantedFact {
  const attribute = rng.pick(ATTRIBUTES);
  const cast = rng.sample(FIRST_NAMES, 14).map((first) => `${first} ${rng.pick(LAST_NAMES)}`);
  const target = cast[0]!;
  const used = new Set<number>();
  const fresh = () => {
    let v: number;
    do v = rng.int(10, 999);
    while (used.has(v));
    used.add(v);
    return v;
  };
  const first = fresh();
  const answer = fresh();
  const fact = (template: string, who: string, v: number) =>
    template.replace('{who}', who).replace('{v}', say(rng, v, 0.3));
  // The planted sentences, in order: the target's first value before its change, others' values around them.
  const planted = [fact(attribute.set, target, first), fact(attribute.change, target, answer)];
  for (const other of cast.slice(1, 8)) {
    planted.push(fact(attribute.set, other, fresh()));
    if (rng.chance(0.3)) planted.push(fact(attribute.change, other, fresh()));
  }
  const filler = (): string =>
    rng.pick(FILLER).replace(
      /\{(\w+)\}/g,
      (_, key: string) =>
        ({
          who: rng.chance(0.08) ? target : rng.pick(cast),
          other: rng.pick(cast),
          thing: rng.pick(THINGS),
          place: rng.pick(PLACES),
          stuff: rng.pick(STUFF),
          n: say(rng, rng.int(2, 400), 0.2),
          day: rng.pick(DAYS),
        })[key] ?? '',
    );
  const lines: string[] = [];
  let chars = 0;
  while (chars < targetChars) {
    const entry = Array.from({ length: rng.int(2, 5) }, filler).join(' ');
    lines.push(entry);
    chars += entry.length + 1;
  }
  // The target's change comes after its first value; the others anywhere, and a sentence with its name
  // beside the attribute and another number after its change at times.
  const firstAt = rng.int(0, Math.floor(lines.length * 0.7));
  const changeAt = rng.int(firstAt + 1, lines.length);
  const near = attribute.near.map((template) => fact(template, target, fresh()));
  const placements: [number, string][] = [
    [firstAt, planted[0]!],
    [changeAt, planted[1]!],
    ...[...planted.slice(2), ...near].map((sentence) => [rng.int(0, lines.length), sentence] as [number, string]),
  ];
  placements.sort((a, b) => b[0] - a[0]);
  for (const [at, sentence] of placements) lines.splice(at, 0, sentence);
  const dated = lines.map((line, i) => `Entry ${i + 1} (${DAYS[i % 7]}): ${line}`);
  return { context: dated.join('\n'), question: attribute.ask.replace('{who}', target), answer };
}

/** Things of five kinds, none of which reads as another kind (no kiwi: a fruit and a bird). */
const CATEGORIES = {
  fruit: [
    'apple',
    'pear',
    'plum',
    'apricot',
    'mango',
    'cherry',
    'lemon',
    'peach',
    'melon',
    'fig',
    'papaya',
    'nectarine',
    'grape',
    'banana',
  ],
  animal: [
    'badger',
    'otter',
    'heron',
    'beaver',
    'ferret',
    'goat',
    'lizard',
    'salmon',
    'owl',
    'rabbit',
    'hedgehog',
    'falcon',
    'donkey',
    'moth',
  ],
  tool: [
    'hammer',
    'chisel',
    'wrench',
    'saw',
    'drill',
    'pliers',
    'trowel',
    'spanner',
    'crowbar',
    'mallet',
    'screwdriver',
    'rake',
    'axe',
    'sander',
  ],
  instrument: [
    'violin',
    'cello',
    'trumpet',
    'flute',
    'harp',
    'oboe',
    'banjo',
    'tuba',
    'piano',
    'clarinet',
    'drum',
    'ukulele',
    'bassoon',
    'accordion',
  ],
  vegetable: [
    'carrot',
    'leek',
    'onion',
    'turnip',
    'cabbage',
    'radish',
    'parsnip',
    'spinach',
    'celery',
    'potato',
    'beetroot',
    'kale',
    'artichoke',
    'courgette',
  ],
} as const;
type Category = keyof typeof CATEGORIES;
const PLURAL: Record<Category, string> = {
  fruit: 'fruits',
  animal: 'animals',
  tool: 'tools',
  instrument: 'musical instruments',
  vegetable: 'vegetables',
};

export const LIST_ORDERS = ['appearance', 'alphabetical', 'reverse'] as const;
export const LIST_FORMATS = ['lines', 'comma', 'json', 'numbered'] as const;

export interface ConstrainedList {
  prose: string;
  instruction: string;
  /** The items the answer must list, in the required order and case. */
  items: string[];
  format: (typeof LIST_FORMATS)[number];
}

const LIST_SENTENCES = [
  'In the shed behind the house {name} found {items}.',
  'The picture book for the nursery shows {items} on its first pages.',
  "Yesterday's market stall had {items} laid out on one table.",
  'The crossword answers this week were {items}.',
  'My notes from the school trip mention {items}.',
  'On the shelf there is a tin with stickers of {items}.',
];
const joinItems = (items: string[]) =>
  items.length === 1
    ? `a ${items[0]}`
    : `${items
        .slice(0, -1)
        .map((item) => `a ${item}`)
        .join(', ')} and a ${items.at(-1)}`;

/**
 * Prose naming things of several kinds; the instruction asks for the things of one kind only, in an
 * order, a format and a case: the answer is that exact list, nothing else.
 */
export function constrainedList(rng: Rng): ConstrainedList {
  const kinds = rng.sample(Object.keys(CATEGORIES) as Category[], rng.int(3, 4));
  const wanted = kinds[0]!;
  const chosen = new Map<Category, string[]>(
    kinds.map((kind, i) => [kind, rng.sample(CATEGORIES[kind], i === 0 ? rng.int(2, 5) : rng.int(1, 4))]),
  );
  const all = rng.shuffle([...chosen.entries()].flatMap(([kind, words]) => words.map((word) => ({ kind, word }))));
  const sentences: string[] = [];
  for (let i = 0; i < all.length;) {
    const take = Math.min(all.length - i, rng.int(2, 4));
    const name = personName(rng).split(' ')[0]!;
    sentences.push(
      rng
        .pick(LIST_SENTENCES)
        .replace('{name}', name)
        .replace('{items}', joinItems(all.slice(i, i + take).map((entry) => entry.word))),
    );
    i += take;
  }
  const inOrder = all.filter((entry) => entry.kind === wanted).map((entry) => entry.word);
  const order = rng.pick(LIST_ORDERS);
  const format = rng.pick(LIST_FORMATS);
  const upper = rng.chance(0.5);
  const sorted =
    order === 'appearance' ? inOrder : order === 'alphabetical' ? [...inOrder].sort() : [...inOrder].sort().reverse();
  const orderText = {
    appearance: 'in the order they first appear',
    alphabetical: 'in alphabetical order',
    reverse: 'in reverse alphabetical order (Z to A)',
  }[order];
  const formatText = {
    lines: 'one per line',
    comma: 'on a single line, separated by commas',
    json: 'as a JSON array of strings',
    numbered: 'as a numbered list (1., 2., …), one per line',
  }[format];
  const instruction =
    `List every one of the ${PLURAL[wanted]} mentioned in the text above and nothing else: ${orderText}, ${formatText}, each in ${upper ? 'capital letters' : 'lower case'} ` +
    `and in the singular. Write no other text.`;
  return {
    prose: sentences.join(' '),
    instruction,
    items: sorted.map((item) => (upper ? item.toUpperCase() : item)),
    format,
  };
}

/** Splits a reply into its list items by the format asked for; null when it is not in that format. */
export function listItems(reply: string, format: ConstrainedList['format']): string[] | null {
  const text = reply
    .trim()
    .replace(/^```(?:json)?\s*|\s*```$/g, '')
    .trim();
  if (format === 'json') {
    try {
      const parsed: unknown = JSON.parse(text);
      return Array.isArray(parsed) && parsed.every((item) => typeof item === 'string')
        ? parsed.map((item: string) => item.trim())
        : null;
    } catch {
      return null;
    }
  }
  if (format === 'comma')
    return text.includes('\n') ? null : text.split(',').map((item) => item.trim().replace(/\.$/, ''));
  const lines = text
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
  if (format === 'lines') return lines.map((line) => line.replace(/^[-*•]\s*/, ''));
  const numbered = lines.map((line, i) => line.match(new RegExp(`^${i + 1}[.)]\\s*(.+)$`))?.[1]?.trim() ?? null);
  return numbered.every((item): item is string => item !== null) ? numbered : null;
}

/** The extraction schema's fields: a JSON Schema subset with strings, integers, booleans and an ISO date. */
export type ExtractionField = { type: 'string' | 'integer' | 'boolean'; description: string; format?: 'date' };
export type ExtractionSchema = {
  type: 'object';
  properties: Record<string, ExtractionField>;
  required: string[];
  additionalProperties: false;
};

export interface Extraction {
  prose: string;
  schema: ExtractionSchema;
  /** The values the JSON must hold: strings compared without case, the date as YYYY-MM-DD. */
  values: Record<string, string | number | boolean>;
}

const ORDER_SETTINGS = [
  {
    thing: 'order',
    item: 'chairs',
    by: 'customer',
    where: 'delivery_city',
    when: 'delivery_date',
    count: 'quantity',
    flag: 'express',
  },
  {
    thing: 'booking',
    item: 'nights',
    by: 'guest',
    where: 'city',
    when: 'arrival_date',
    count: 'nights',
    flag: 'breakfast_included',
  },
  {
    thing: 'repair',
    item: 'bikes',
    by: 'owner',
    where: 'workshop_city',
    when: 'pickup_date',
    count: 'bikes',
    flag: 'parts_ordered',
  },
  {
    thing: 'print job',
    item: 'copies',
    by: 'client',
    where: 'shop_city',
    when: 'due_date',
    count: 'copies',
    flag: 'colour',
  },
  {
    thing: 'catering request',
    item: 'meals',
    by: 'organiser',
    where: 'venue_city',
    when: 'event_date',
    count: 'meals',
    flag: 'vegetarian_only',
  },
] as const;

const dateText = (rng: Rng, year: number, month: number, day: number) => {
  const ordinal = (n: number) => `${n}${[11, 12, 13].includes(n) ? 'th' : (['th', 'st', 'nd', 'rd'][n % 10] ?? 'th')}`;
  return rng.pick([
    `the ${ordinal(day)} of ${MONTHS[month - 1]} ${year}`,
    `${MONTHS[month - 1]} ${day}, ${year}`,
    `${day} ${MONTHS[month - 1]} ${year}`,
  ]);
};
const isoDate = (year: number, month: number, day: number) =>
  `${year}-${String(month).padStart(2, '0')}-${String(day).padStart(2, '0')}`;

/**
 * A message about one request (an order, a booking, …) with another person's request beside it and the
 * count corrected once: the JSON must hold the asker's values, the count as corrected, the date as
 * YYYY-MM-DD and the yes/no fact as a boolean.
 */
export function extraction(rng: Rng): Extraction {
  const s = rng.pick(ORDER_SETTINGS);
  const [asker, other] = people(rng, 2) as [string, string];
  const [city, otherCity] = rng.sample(CITIES, 2) as [string, string];
  const year = rng.int(2025, 2027);
  const [month, otherMonth] = rng.sample([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], 2) as [number, number];
  const day = rng.int(1, 28);
  const firstCount = rng.int(2, 60);
  let count: number;
  do count = rng.int(2, 90);
  while (count === firstCount);
  const otherCount = rng.int(2, 90);
  const flag = rng.chance(0.5);
  const flagText = {
    express: [flag ? 'It is urgent, so please send it express.' : 'There is no rush, standard shipping is fine.'],
    breakfast_included: [flag ? 'Breakfast should be included.' : 'We will eat out, so no breakfast please.'],
    parts_ordered: [flag ? 'The parts have already been ordered.' : 'Nobody has ordered the parts yet.'],
    colour: [flag ? 'Everything is to be printed in colour.' : 'Black and white is fine this time.'],
    vegetarian_only: [flag ? 'All meals must be vegetarian.' : 'The meals do not need to be vegetarian.'],
  }[s.flag];
  const sentences = rng.shuffle([
    `${other} from ${otherCity} made a similar ${s.thing} last time: ${say(rng, otherCount)} ${s.item} ` +
      `for ${dateText(rng, year, otherMonth, rng.int(1, 28))}.`,
    `My colleague reminded me that ${other}'s ${s.thing} is handled separately.`,
  ]);
  const prose = [
    `Hello, this is ${asker}.`,
    sentences[0],
    `I would like to place a ${s.thing} for ${say(rng, firstCount)} ${s.item}, in ${city}, for ${dateText(rng, year, month, day)}.`,
    rng.pick([
      `Actually, please make that ${say(rng, count)} ${s.item} instead.`,
      `Sorry, correction: we need ${say(rng, count)} ${s.item}, not ${say(rng, firstCount)}.`,
    ]),
    rng.pick(flagText),
    sentences[1],
    'Thanks!',
  ].join(' ');
  const schema: ExtractionSchema = {
    type: 'object',
    properties: {
      [s.by]: { type: 'string', description: `Full name of the person placing this ${s.thing}.` },
      [s.count]: { type: 'integer', description: `How many ${s.item}, as finally requested.` },
      [s.where]: { type: 'string', description: 'The city.' },
      [s.when]: { type: 'string', format: 'date', description: 'The date, as YYYY-MM-DD.' },
      [s.flag]: { type: 'boolean', description: 'Whether it applies.' },
    },
    required: [s.by, s.count, s.where, s.when, s.flag],
    additionalProperties: false,
  };
  return {
    prose,
    schema,
    values: { [s.by]: asker, [s.count]: count, [s.where]: city, [s.when]: isoDate(year, month, day), [s.flag]: flag },
  };
}

/**
 * The problems of `value` against the extraction schema (all fields required, nothing else, types and the date's
 * form).
 */
export function extractionSchemaProblems(schema: ExtractionSchema, value: unknown): string[] {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return ['not a JSON object'];
  const record = value as Record<string, unknown>;
  const problems: string[] = [];
  for (const field of schema.required) if (!(field in record)) problems.push(`"${field}" is missing`);
  for (const [field, fieldValue] of Object.entries(record)) {
    const property = schema.properties[field];
    if (!property) problems.push(`"${field}" is not in the schema`);
    else if (property.type === 'integer' && !Number.isInteger(fieldValue))
      problems.push(`"${field}" is not an integer`);
    else if (property.type === 'boolean' && typeof fieldValue !== 'boolean')
      problems.push(`"${field}" is not a boolean`);
    else if (property.type === 'string' && typeof fieldValue !== 'string') problems.push(`"${field}" is not a string`);
    else if (property.format === 'date' && !/^\d{4}-\d{2}-\d{2}$/.test(String(fieldValue)))
      problems.push(`"${field}" is not a YYYY-MM-DD date`);
  }
  return problems;
}

/**
 * The whole number a reply ends with (separators in it allowed), or null: a reply may reason first, its last
 * number is its answer.
 */
export function lastNumber(reply: string): number | null {
  const found = [...reply.replace(/(\d)[,\u00a0\u202f'_ ](?=\d{3}(?!\d))/g, '$1').matchAll(/-?\d+(?:\.\d+)?/g)].at(-1);
  return found ? Number(found[0]) : null;
}
