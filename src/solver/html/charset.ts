/**
 * Text decoding for fetched bodies, in the order browsers use: byte-order mark, then the charset of the
 * Content-Type header, then a <meta> declaration near the top of an HTML document, then UTF-8 when the
 * bytes are valid UTF-8, else windows-1252 (what "ISO-8859-1" means on the web).
 */

const META_SCAN_BYTES = 4096;

export function supportedCharset(label: string | undefined): string | undefined {
  if (!label) return undefined;
  try {
    return new TextDecoder(label.trim().replace(/^["']|["']$/g, '')).encoding;
  } catch {
    return undefined;
  }
}

export function charsetFromContentType(contentType: string | undefined): string | undefined {
  const match = contentType?.match(/charset\s*=\s*("?)([^";,\s]+)\1/i);
  return supportedCharset(match?.[2]);
}

export function charsetFromMeta(bytes: Uint8Array): string | undefined {
  const head = Buffer.from(bytes.subarray(0, META_SCAN_BYTES)).toString('latin1');
  const label =
    head.match(/<meta[^>]+charset\s*=\s*["']?\s*([\w.:-]+)/i)?.[1] ??
    head.match(/<meta[^>]+content\s*=\s*["'][^"']*charset\s*=\s*([\w.:-]+)/i)?.[1];
  const charset = supportedCharset(label);
  // A document that can declare its charset in ASCII is not UTF-16, whatever it says (HTML spec).
  return charset?.startsWith('utf-16') ? 'utf-8' : charset;
}

function charsetFromBom(bytes: Uint8Array): string | undefined {
  if (bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf) return 'utf-8';
  if (bytes[0] === 0xfe && bytes[1] === 0xff) return 'utf-16be';
  if (bytes[0] === 0xff && bytes[1] === 0xfe) return 'utf-16le';
  return undefined;
}

export function decodeBody(bytes: Uint8Array, contentType: string | undefined, isHtml: boolean): string {
  const declared =
    charsetFromBom(bytes) ?? charsetFromContentType(contentType) ?? (isHtml ? charsetFromMeta(bytes) : undefined);
  if (declared) return new TextDecoder(declared).decode(bytes);
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return new TextDecoder('windows-1252').decode(bytes);
  }
}
