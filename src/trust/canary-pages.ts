import crypto from 'node:crypto';
import { tokenCells, GRID_COLUMNS, GRID_ROWS } from './pixels';

/**
 * What canary pages look like (docs/trust.md, "Canary pages"): ordinary small websites. A page is drawn
 * from its canary's random seed (its token): one of several templates (an article, a product page, a
 * documentation page, a listing), a path of the kind such sites use (/blog/2024/03/some-slug,
 * /products/slug-123), and text made of plausible sentences from a word bank. Its site (name, menu,
 * footer, class names) is drawn from its host name, so that pages of one host look like one site.
 * The known answer is the page's own text: a fetch must return it (by the redundant runs' text measure),
 * not a token. Pure functions: the page is drawn again from the same seed when it is served and judged.
 */

/** A small, fast PRNG (sfc32) seeded from a hash: the same seed draws the same page. */
export function seededRandom(seed: string): () => number {
  const h = crypto.createHash('sha256').update(seed).digest();
  let [a, b, c, d] = [h.readUInt32LE(0), h.readUInt32LE(4), h.readUInt32LE(8), h.readUInt32LE(12)];
  return () => {
    a >>>= 0;
    b >>>= 0;
    c >>>= 0;
    d >>>= 0;
    let t = (a + b) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    d = (d + 1) | 0;
    t = (t + d) | 0;
    c = (c + t) | 0;
    return (t >>> 0) / 4294967296;
  };
}

type Rng = () => number;
const int = (rng: Rng, min: number, max: number) => min + Math.floor(rng() * (max - min + 1));
const pick = <T>(rng: Rng, items: readonly T[]): T => items[Math.floor(rng() * items.length)]!;
const capital = (text: string) => text.charAt(0).toUpperCase() + text.slice(1);
const titleCase = (text: string) => text.split(' ').map(capital).join(' ');

const NOUNS = [
  'garden',
  'kitchen',
  'harbor',
  'lantern',
  'bicycle',
  'notebook',
  'market',
  'river',
  'orchard',
  'workshop',
  'library',
  'meadow',
  'studio',
  'bakery',
  'cabinet',
  'compass',
  'engine',
  'festival',
  'gallery',
  'island',
  'journey',
  'ladder',
  'mirror',
  'window',
  'pottery',
  'recipe',
  'season',
  'teapot',
  'village',
  'weather',
  'canvas',
  'backpack',
  'blanket',
  'camera',
  'ceramic',
  'desk',
  'fabric',
  'forest',
  'glacier',
  'hammock',
  'helmet',
  'jacket',
  'kettle',
  'mountain',
  'needle',
  'oven',
  'paddle',
  'pillow',
  'planner',
  'printer',
  'quilt',
  'sandal',
  'scarf',
  'shelf',
  'skillet',
  'speaker',
  'sweater',
  'tent',
  'trail',
  'umbrella',
  'valley',
  'wallet',
  'whistle',
  'budget',
  'schedule',
  'invoice',
  'deadline',
  'routine',
  'habit',
  'project',
  'neighborhood',
  'coffee',
  'bread',
  'soup',
  'salad',
  'cheese',
  'honey',
  'lemon',
  'pepper',
  'tomato',
  'garlic',
  'spinach',
  'mushroom',
  'server',
  'database',
  'browser',
  'keyboard',
  'network',
  'update',
  'release',
  'plugin',
  'dashboard',
  'report',
  'account',
  'team',
] as const;
const ADJECTIVES = [
  'quiet',
  'bright',
  'simple',
  'practical',
  'old',
  'modern',
  'small',
  'generous',
  'careful',
  'rustic',
  'gentle',
  'sturdy',
  'light',
  'warm',
  'fresh',
  'local',
  'handmade',
  'seasonal',
  'reliable',
  'honest',
  'clever',
  'patient',
  'slow',
  'quick',
  'forgotten',
  'favorite',
  'useful',
  'ordinary',
  'unusual',
  'cozy',
  'durable',
  'compact',
  'hidden',
  'northern',
  'coastal',
  'weekly',
  'annual',
  'early',
  'late',
  'crisp',
  'golden',
  'green',
  'blue',
  'wooden',
  'woolen',
  'smart',
  'budget',
  'classic',
] as const;
const VERBS = [
  'build',
  'repair',
  'plan',
  'cook',
  'clean',
  'organize',
  'compare',
  'choose',
  'carry',
  'store',
  'share',
  'measure',
  'paint',
  'test',
  'improve',
  'protect',
  'replace',
  'visit',
  'explore',
  'prepare',
  'track',
  'review',
  'borrow',
  'arrange',
  'sort',
] as const;
const ADVERBS = [
  'quietly',
  'slowly',
  'carefully',
  'honestly',
  'usually',
  'often',
  'rarely',
  'finally',
  'simply',
  'mostly',
  'suddenly',
  'easily',
] as const;
const PEOPLE = [
  'Maria Lopez',
  'Tom Becker',
  'Aisha Khan',
  'Jonas Berg',
  'Lena Novak',
  'Sam Okafor',
  'Priya Raman',
  'Daniel Reyes',
  'Clara Hoffman',
  'Noah Fischer',
  'Emma Sato',
  'Lucas Martin',
  'Hana Kim',
  'Oliver Grant',
  'Sofia Rossi',
  'Ben Walker',
  'Mila Petrova',
  'Ravi Mehta',
] as const;
const PLACES = [
  'Lisbon',
  'Portland',
  'Leeds',
  'Austin',
  'Lyon',
  'Bergen',
  'Osaka',
  'Halifax',
  'Ghent',
  'Tucson',
  'Cork',
  'Dunedin',
  'Porto',
  'Bristol',
] as const;
/** The months' English names, in order (also the audit questions' dates). */
export const MONTHS = [
  'January',
  'February',
  'March',
  'April',
  'May',
  'June',
  'July',
  'August',
  'September',
  'October',
  'November',
  'December',
] as const;

/** Sentence shapes; `{n}` a noun, `{a}` an adjective, `{v}` a verb, `{d}` an adverb, `{p}` a place, `{k}` a number. */
const SENTENCES = [
  'The {a} {n} is the first thing most people notice when they {v} a {n}.',
  'We {d} {v} the {n} before the {n} arrives, and it saves a lot of time.',
  'A {a} {n} does not need much, only a {a} {n} and some patience.',
  'Last {m} we tried to {v} our {n} in {p}, and it went better than expected.',
  'If you {v} the {n} every week, the {n} stays {a} for years.',
  'Our readers asked how to {v} a {a} {n} without spending more than {k} dollars.',
  'The {n} from {p} turned out to be {a}, {a} and {d} useful.',
  'Most of the {n} guides we read forget to {v} the {n} at all.',
  'It takes about {k} minutes to {v} a {n}, a little longer on a {a} day.',
  'There is no {a} answer, but a {a} {n} helps more than a new {n}.',
  'Start with the {n}, then {v} the {n}, and leave the {n} for last.',
  'Many teams {v} their {n} {d}, which is why a {a} {n} matters.',
  'Our {a} {n} came back from {p} with {k} new ideas for the {n}.',
  'You can {v} the {n} by hand or use a {a} {n} instead.',
  'Please {v} the {n} before you {v} the {n}; the order matters here.',
  'After {k} weeks the {n} still looked {a}, and the {n} was {d} quiet.',
  'We asked {w} how they {v} a {n}, and the answer was {d} {a}.',
  'Nobody expected a {a} {n} to {v} so well in {p}.',
  'The {n} section covers how to {v}, {v} and {v} a {n}.',
  'Keep a {a} {n} near the {n}; you will {v} it more often than you think.',
] as const;

function sentence(rng: Rng): string {
  return pick(rng, SENTENCES).replace(/\{(\w)\}/g, (_, slot: string) => {
    switch (slot) {
      case 'n':
        return pick(rng, NOUNS);
      case 'a':
        return pick(rng, ADJECTIVES);
      case 'v':
        return pick(rng, VERBS);
      case 'd':
        return pick(rng, ADVERBS);
      case 'p':
        return pick(rng, PLACES);
      case 'm':
        return pick(rng, MONTHS);
      case 'w':
        return pick(rng, PEOPLE);
      default:
        return String(int(rng, 2, 90));
    }
  });
}
const paragraph = (rng: Rng, min = 2, max = 5) =>
  Array.from({ length: int(rng, min, max) }, () => sentence(rng)).join(' ');
const phrase = (rng: Rng) => `${pick(rng, ADJECTIVES)} ${pick(rng, NOUNS)}`;
const heading = (rng: Rng) =>
  pick(rng, [
    () => `How to ${pick(rng, VERBS)} a ${phrase(rng)}`,
    () => `${titleCase(phrase(rng))} and the ${pick(rng, NOUNS)}`,
    () => `${int(rng, 3, 12)} ways to ${pick(rng, VERBS)} your ${pick(rng, NOUNS)}`,
    () => `Why the ${phrase(rng)} still matters`,
    () => `A ${phrase(rng)} in ${pick(rng, PLACES)}`,
    () => `Notes on the ${phrase(rng)}`,
  ])();
const slugOf = (text: string) =>
  text
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-|-$/g, '');

/** How a site names its classes: each site picks one style, as real sites differ. */
type ClassStyle = (block: string, element?: string) => string;
const CLASS_STYLES: readonly ((rng: Rng) => ClassStyle)[] = [
  () => (block, element) => (element ? `${block}__${element}` : block),
  (rng) => {
    const prefix = pick(rng, ['site', 'c', 'ui', 'wp', 'theme', 'x']);
    return (block, element) => `${prefix}-${block}${element ? `-${element}` : ''}`;
  },
  (rng) => {
    const salt = Math.floor(rng() * 1e9).toString(36);
    return (block, element) =>
      `css-${crypto
        .createHash('md5')
        .update(`${salt}${block}${element ?? ''}`)
        .digest('hex')
        .slice(0, 6)}`;
  },
  () => (block, element) => `${element ?? block} px-4 text-${element ? 'base' : 'lg'}`,
];

interface Site {
  name: string;
  menu: string[];
  cls: ClassStyle;
  footer: string;
  color: string;
  font: string;
}

/** The site a host name shows: the same for every page of that host. */
export function siteOf(host: string): Site {
  const rng = seededRandom(`site:${host.toLowerCase()}`);
  const label = host
    .split('.')[0]!
    .replace(/[^a-z]+/gi, ' ')
    .trim();
  const name =
    label.length >= 3 && !/^(www|shop|blog|docs)$/i.test(label)
      ? titleCase(label)
      : titleCase(`${pick(rng, ADJECTIVES)} ${pick(rng, NOUNS)}`);
  const menu = [
    'Home',
    ...[
      ...new Set(
        Array.from({ length: 5 }, () =>
          pick(rng, [
            'Blog',
            'Shop',
            'About',
            'Contact',
            'Guides',
            'Recipes',
            'News',
            'Help',
            'Journal',
            'Stories',
            'Events',
            'Docs',
          ]),
        ),
      ),
    ],
  ];
  return {
    name,
    menu,
    cls: pick(rng, CLASS_STYLES)(rng),
    footer: `© ${int(rng, 2009, 2025)}–2026 ${name}. ${pick(rng, ['All rights reserved.', 'Made with care.', `Based in ${pick(rng, PLACES)}.`, 'Independent since day one.'])}`,
    color: `#${Math.floor(rng() * 0xffffff)
      .toString(16)
      .padStart(6, '0')}`,
    font: pick(rng, [
      'Georgia, serif',
      'system-ui, sans-serif',
      '"Helvetica Neue", Arial, sans-serif',
      'Palatino, serif',
      'Verdana, sans-serif',
    ]),
  };
}

export const PAGE_TEMPLATES = ['article', 'product', 'docs', 'listing'] as const;
type Template = (typeof PAGE_TEMPLATES)[number];

interface Drawn {
  template: Template;
  path: string;
  title: string;
  main: string;
}

function draw(rng: Rng, site: Site): Drawn {
  const { cls } = site;
  const template = pick(rng, PAGE_TEMPLATES);
  const title = heading(rng);
  const slug = slugOf(title)
    .split('-')
    .slice(0, int(rng, 4, 7))
    .join('-');
  const year = int(rng, 2019, 2026);
  const month = int(rng, 1, 12);
  const mm = String(month).padStart(2, '0');
  const number = int(rng, 100, 99_999);
  const sections = (count: number) =>
    Array.from(
      { length: count },
      () =>
        `<h2 class="${cls('content', 'heading')}">${capital(heading(rng))}</h2>\n<p>${paragraph(rng)}</p>${rng() < 0.4 ? `\n<p>${paragraph(rng, 1, 3)}</p>` : ''}`,
    ).join('\n');
  const list = () =>
    `<ul class="${cls('content', 'list')}">${Array.from({ length: int(rng, 3, 6) }, () => `<li>${capital(sentence(rng))}</li>`).join('')}</ul>`;
  if (template === 'article') {
    const author = pick(rng, PEOPLE);
    const path = pick(rng, [
      `/blog/${year}/${mm}/${slug}`,
      `/${year}/${mm}/${String(int(rng, 1, 28)).padStart(2, '0')}/${slug}/`,
      `/posts/${slug}`,
      `/news/${slug}-${number}`,
      `/journal/${slug}.html`,
    ]);
    const main = `<article class="${cls('post')}">
<h1 class="${cls('post', 'title')}">${title}</h1>
<p class="${cls('post', 'meta')}">By ${author} · ${MONTHS[month - 1]} ${int(rng, 1, 28)}, ${year} · ${int(rng, 3, 14)} min read</p>
<p class="${cls('post', 'lead')}">${paragraph(rng, 2, 4)}</p>
${sections(int(rng, 2, 4))}
${rng() < 0.5 ? `<blockquote>${sentence(rng)}</blockquote>\n` : ''}${rng() < 0.6 ? list() : ''}
<p>${paragraph(rng)}</p>
</article>`;
    return { template, path, title, main };
  }
  if (template === 'product') {
    const name = titleCase(
      `${pick(rng, ADJECTIVES)} ${pick(rng, NOUNS)} ${pick(rng, ['set', 'kit', 'pack', 'edition', 'model', 'bundle', ''])}`.trim(),
    );
    const path = pick(rng, [
      `/products/${slugOf(name)}-${number}`,
      `/shop/${pick(rng, NOUNS)}/${slugOf(name)}`,
      `/p/${number}/${slugOf(name)}`,
      `/item/${slugOf(name)}`,
    ]);
    const specs = Array.from(
      { length: int(rng, 3, 6) },
      () =>
        `<tr><th>${capital(pick(rng, ['weight', 'material', 'size', 'color', 'finish', 'origin', 'warranty', 'capacity']))}</th><td>${capital(phrase(rng))}</td></tr>`,
    ).join('');
    const reviews = Array.from(
      { length: int(rng, 1, 4) },
      () =>
        `<div class="${cls('review')}"><strong>${pick(rng, PEOPLE)}</strong> <span>${int(rng, 3, 5)} ` +
        `of 5</span><p>${paragraph(rng, 1, 3)}</p></div>`,
    ).join('\n');
    const main = `<div class="${cls('product')}">
<nav class="${cls('breadcrumb')}">Home / ${capital(pick(rng, NOUNS))} / ${name}</nav>
<h1 class="${cls('product', 'name')}">${name}</h1>
<p class="${cls('product', 'price')}">$${int(rng, 5, 480)}.${pick(rng, ['00', '50', '95', '99'])} · SKU ${pick(rng, ['A', 'B', 'K', 'M', 'T'])}${number}</p>
<p class="${cls('product', 'description')}">${paragraph(rng, 3, 6)}</p>
<table class="${cls('product', 'specs')}">${specs}</table>
<h2>Reviews</h2>
${reviews}
</div>`;
    return { template, path, title: name, main };
  }
  if (template === 'docs') {
    const section = pick(rng, ['getting-started', 'guides', 'reference', 'how-to', 'faq', 'setup']);
    const path = pick(rng, [
      `/docs/${section}/${slug}`,
      `/guide/${slug}.html`,
      `/help/articles/${number}-${slug}`,
      `/kb/${section}/${slug}`,
    ]);
    const code = Array.from(
      { length: int(rng, 2, 5) },
      () =>
        `${pick(rng, VERBS)}_${pick(rng, NOUNS)}(${pick(rng, ['true', String(int(rng, 1, 60)), `"${pick(rng, NOUNS)}"`])})`,
    ).join('\n');
    const toc = Array.from(
      { length: int(rng, 3, 7) },
      () => `<li><a href="/docs/${section}/${slugOf(phrase(rng))}">${capital(phrase(rng))}</a></li>`,
    ).join('');
    const main = `<aside class="${cls('sidebar')}"><ul>${toc}</ul></aside>
<div class="${cls('doc')}">
<h1 class="${cls('doc', 'title')}">${title}</h1>
<p>${paragraph(rng, 2, 4)}</p>
<pre class="${cls('doc', 'code')}"><code>${code}</code></pre>
${sections(int(rng, 1, 3))}
<div class="${cls('doc', 'note')}"><strong>Note:</strong> ${sentence(rng)}</div>
</div>`;
    return { template, path, title, main };
  }
  const topic = pick(rng, NOUNS);
  const path = pick(rng, [
    `/category/${topic}/${slugOf(phrase(rng))}`,
    `/collections/${slugOf(phrase(rng))}-${number}`,
    `/tag/${slugOf(phrase(rng))}/page/${int(rng, 2, 40)}`,
    `/${topic}s/${slugOf(phrase(rng))}/`,
  ]);
  const items = Array.from({ length: int(rng, 4, 9) }, () => {
    const itemTitle = capital(heading(rng));
    return (
      `<li class="${cls('card')}"><a class="${cls('card', 'link')}" href="/${slugOf(itemTitle)}">${itemTitle}</a><p class="${cls('card', 'summary')}">${paragraph(rng, 1, 2)}</p><span class="${cls('card', 'meta')}">${MONTHS[int(rng, 0, 11)]} ` +
      `${int(rng, 1, 28)}, ${year}</span></li>`
    );
  }).join('\n');
  const listTitle = `${capital(pick(rng, ADJECTIVES))} ${topic}s`;
  const main = `<section class="${cls('listing')}">
<h1 class="${cls('listing', 'title')}">${listTitle}</h1>
<p class="${cls('listing', 'intro')}">${paragraph(rng, 1, 3)}</p>
<ul class="${cls('listing', 'items')}">
${items}
</ul>
<nav class="${cls('pagination')}">Page ${int(rng, 2, 9)} of ${int(rng, 10, 40)}</nav>
</section>`;
  return { template, path, title: listTitle, main };
}

export interface CanaryPage {
  template: Template;
  /** Where the page is served on its host: a path like the site's other pages. */
  path: string;
  html: string;
}

/**
 * The page of a canary, drawn from its seed on its host. A screenshot's page is the same site and path
 * but shows the seed's bits as a grid of cells filling the viewport (src/trust/pixels.ts reads them back).
 */
export function canaryPage(seed: string, taskType: string, host: string): CanaryPage {
  const site = siteOf(host);
  const drawn = draw(seededRandom(`page:${seed}`), site);
  if (taskType === 'screenshot') {
    const cells = tokenCells(seed)
      .map((dark) => (dark ? '<i class="d"></i>' : '<i></i>'))
      .join('');
    return {
      template: drawn.template,
      path: drawn.path,
      html: `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${drawn.title} | ${site.name}</title><style>
html,body{margin:0;height:100%;overflow:hidden;background:#fff}
main{position:fixed;inset:0;display:grid;grid-template-columns:repeat(${GRID_COLUMNS},1fr);grid-template-rows:repeat(${GRID_ROWS},1fr)}
i{display:block}.d{background:#000}
</style></head><body><main>${cells}</main></body></html>
`,
    };
  }
  return { template: drawn.template, path: drawn.path, html: layout(site, drawn.title, drawn.main) };
}

/** A page of `site`: its header, menu and footer around `main`, as every page of the site has them. */
function layout(site: Site, title: string, main: string): string {
  const { cls } = site;
  const nav = site.menu
    .map((item) => `<li><a href="/${item === 'Home' ? '' : item.toLowerCase()}">${item}</a></li>`)
    .join('');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} | ${site.name}</title>
<style>body{font-family:${site.font};margin:0;color:#222}.${cls('header').split(' ')[0]}{background:${site.color};padding:12px 24px}main{max-width:760px;margin:24px auto;padding:0 16px;line-height:1.6}</style>
</head>
<body>
<header class="${cls('header')}"><a class="${cls('header', 'logo')}" href="/">${site.name}</a><nav class="${cls('nav')}"><ul>${nav}</ul></nav></header>
<main>
${main}
</main>
<footer class="${cls('footer')}"><p>${site.footer}</p></footer>
</body>
</html>
`;
}

/**
 * The pages every site has besides its articles: its home page (`/`) and a page for each item of its
 * menu (`/blog`, `/about`, …), drawn from the host name alone, so that a canary site answers them as any
 * small site would, the same on every visit; null for any other path (the site's 404 page).
 */
export function sitePage(host: string, path: string): string | null {
  const site = siteOf(host);
  const section =
    path === '/'
      ? 'Home'
      : site.menu.find((item) => item !== 'Home' && `/${item.toLowerCase()}` === path.replace(/\/$/, ''));
  if (!section) return null;
  const rng = seededRandom(`section:${host.toLowerCase()}:${section}`);
  const { cls } = site;
  const title = section;
  if (section === 'About' || section === 'Contact' || section === 'Help') {
    const main = `<section class="${cls('page')}">
<h1 class="${cls('page', 'title')}">${section}</h1>
<p>${paragraph(rng, 3, 6)}</p>
<p>${paragraph(rng, 2, 4)}</p>
${section === 'Contact' ? `<p class="${cls('page', 'contact')}">Write to us at hello@${host.toLowerCase().replace(/:\d+$/, '')} or visit us in ${pick(rng, PLACES)}.</p>` : ''}
</section>`;
    return layout(site, title, main);
  }
  const items = Array.from({ length: int(rng, 5, 10) }, () => {
    const itemTitle = capital(heading(rng));
    return (
      `<li class="${cls('card')}"><a class="${cls('card', 'link')}" href="/${section === 'Home' ? 'posts' : section.toLowerCase()}/${slugOf(itemTitle)}">${itemTitle}</a><p class="${cls('card', 'summary')}">${paragraph(rng, 1, 2)}</p><span class="${cls('card', 'meta')}">${MONTHS[int(rng, 0, 11)]} ` +
      `${int(rng, 1, 28)}, ${int(rng, 2019, 2026)}</span></li>`
    );
  }).join('\n');
  const main = `<section class="${cls('listing')}">
<h1 class="${cls('listing', 'title')}">${section === 'Home' ? `Welcome to ${site.name}` : `${section}: the latest`}</h1>
<p class="${cls('listing', 'intro')}">${paragraph(rng, 1, 3)}</p>
<ul class="${cls('listing', 'items')}">
${items}
</ul>
</section>`;
  return layout(site, title, main);
}

/**
 * The text a fetch of the page must return: its body's text (markup, styles and the head dropped).
 * The result is compared with it by the redundant runs' text measure (src/trust/similarity.ts).
 */
export function canaryPageText(html: string): string {
  return html
    .replace(/<head>[\s\S]*?<\/head>/i, ' ')
    .replace(/<(style|script)[\s\S]*?<\/\1>/gi, ' ')
    .replace(/<[^>]+>/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
}

/**
 * A fresh label for a wildcard canary host: two words, as a small site's name would be (`quiet-harbor`), and a
 * number half of the time.
 */
export function siteLabel(): string {
  const rng = seededRandom(crypto.randomBytes(16).toString('hex'));
  return `${pick(rng, ADJECTIVES)}-${pick(rng, NOUNS)}${rng() < 0.5 ? `-${int(rng, 2, 99)}` : ''}`;
}
