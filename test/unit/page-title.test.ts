import { documentTitle, parseDocument, titleOfHtml } from '../../src/solver/html/markdown';

/** What the page's DOM reads: the answer titleOfHtml must give, however it gets there. */
const domTitle = (html: string) => documentTitle(parseDocument(html).document);

const CASES = [
  '<!DOCTYPE html><html><head><meta charset="utf-8"><title>Plain title</title></head><body><h1>Heading</h1></body></html>',
  '<html><head><TITLE lang="en">  Spaced\n\t title  </TITLE></head><body></body></html>',
  '<head><title>Caf&eacute; &amp; cr&egrave;me</title></head>',
  '<head><title>a <b>bold</b> title</title></head>',
  '<head><meta content="<title>In an attribute</title>"><title>Real</title></head>',
  "<head><meta content='<title>Single quoted</title>'><title>Real</title></head>",
  '<head><!-- <title>Commented</title> --><title>Real</title></head>',
  '<head><script>document.title = "<title>Scripted</title>"</script><title>Real</title></head>',
  '<head><style>/* <title>Styled</title> */</style><title>Real</title></head>',
  '<body><svg><title>Icon</title></svg><h1>Heading only</h1></body>',
  '<head><title></title></head><body><h2>Second-level heading</h2></body>',
  '<head><title>   </title></head><body><h1>After a blank title</h1></body>',
  '<head><title/>Self-closed</head><body><h1>Heading</h1></body>',
  '<head><title>Unclosed',
  '<p>Body text first</p><title>Late title</title>',
  '<head><textarea><title>In a textarea</title></textarea><title>Real</title></head>',
  '<head><template><title>In a template</title></template><title>Real</title></head>',
  '<head><noscript><title>No script</title></noscript><title>Real</title></head>',
  '<head><base href="/x/"><link rel="stylesheet" href="a.css"/><title data-x=">">Quoted bracket</title></head>',
  '<head><title>One</title><title>Two</title></head>',
  '<head>a < b <title>After a bare bracket</title></head>',
  '<head><titles>Not a title</titles><title>Real</title></head>',
  '<head><title>Closing </title > with space</head>',
  '<!doctype html><html><head><title>Tab\u00a0and nbsp</title></head></html>',
  'No markup at all',
  '',
];

describe('a page title read without a DOM', () => {
  test.each(CASES.map((html) => [html]))('%j reads as its DOM does', (html) => {
    expect(titleOfHtml(html)).toBe(domTitle(html));
  });

  test('markup built at random from the pieces that trip readers reads as its DOM does', () => {
    const pieces = [
      '<title>Plain</title>', '<TITLE>Upper</TITLE>', '<title> spaced  out </title>', '<title>&amp;</title>', '<title><i>x</i></title>',
      '<!-- <title>c</title> -->', '<script><title>s</title></script>', '<style>t{}</style>', '<svg><title>v</title></svg>',
      '<meta name="a" content="<title>q</title>">', "<meta content='x'>", '<meta charset=utf-8>', '<link rel=icon href=/a.png />',
      '<h1>Heading</h1>', '<h2>Sub</h2>', '<p>text</p>', 'loose text', '<br/>', '<title/>', '<head>', '</head>', '<body>', '<html>', '<!DOCTYPE html>',
      '<title>', '</title>', '<', '&lt;', '<textarea><title>t</title></textarea>',
    ];
    let seed = 7;
    const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
    for (let n = 0; n < 2000; n++) {
      const html = Array.from({ length: 1 + Math.floor(random() * 6) }, () => pieces[Math.floor(random() * pieces.length)]).join('');
      expect([html, titleOfHtml(html)]).toEqual([html, domTitle(html)]);
    }
  });
});
