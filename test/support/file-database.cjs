// Gives one test file a database of its own, copied from the migrated template: node file-database.cjs <base url> <name>.
// A plain script, run synchronously by the per-file setup (Jest's setup files cannot await).
const { Client } = require('pg');

async function main() {
  const [baseUrl, name] = process.argv.slice(2);
  const base = new URL(baseUrl);
  const template = `${base.pathname.slice(1)}_template`;
  const server = new URL(baseUrl);
  server.pathname = '/postgres';
  const client = new Client({ connectionString: server.toString() });
  await client.connect();
  try {
    // This worker's earlier files' databases are done with: their stacks have closed, and what they left running is
    // dropped with them. Other workers' files may still be running, so their databases stay.
    const worker = name.slice(0, name.lastIndexOf('_') + 1).replace(/_/g, '\\_');
    const earlier = await client.query('SELECT datname FROM pg_database WHERE datname LIKE $1', [`${worker}%`]);
    for (const { datname } of earlier.rows) await client.query(`DROP DATABASE IF EXISTS "${datname}" WITH (FORCE)`);
    await client.query(`CREATE DATABASE "${name}" TEMPLATE "${template}"`);
  } finally {
    await client.end();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
