// The peer of `make bench-peer`: @supabase/stripe-sync-engine (a library
// with no server of its own) behind the smallest node:http wrapper that
// serves a Stripe webhook endpoint, the way its README shows it used:
// sync.processWebhook(rawBody, signature) per request, one Postgres upsert
// per event. CommonJS on purpose: the package's ESM build does not find its
// migrations directory, its CommonJS build does.
//
// Environment (scripts/bench-peer.sh sets it):
//   PEER_MODULES         node_modules directory the package was installed in (.dev/peer/node_modules)
//   PEER_DATABASE_URL    Postgres URL (the benchmark's durable cluster)
//   PEER_LISTEN          127.0.0.1:<port>
//   PEER_WEBHOOK_SECRET  endpoint secret the signatures are checked against
//   PEER_STRIPE_API      stripe-mock base URL, so nothing leaves the machine
'use strict';

const http = require('node:http');

function need(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`peer: ${name} is required`);
    process.exit(2);
  }
  return v;
}

const modules = need('PEER_MODULES');
const load = (name) => require(require.resolve(name, { paths: [modules] }));
const { StripeSync, runMigrations } = load('@supabase/stripe-sync-engine');
const Stripe = load('stripe');

const databaseUrl = need('PEER_DATABASE_URL');
const listen = new URL('http://' + need('PEER_LISTEN'));
const secret = need('PEER_WEBHOOK_SECRET');
const stripeAPI = new URL(need('PEER_STRIPE_API'));
const maxBody = 1 << 20;

if (!['127.0.0.1', 'localhost'].includes(listen.hostname) || !['127.0.0.1', 'localhost'].includes(stripeAPI.hostname)) {
  console.error('peer: PEER_LISTEN and PEER_STRIPE_API must be on loopback');
  process.exit(2);
}

async function main() {
  const schema = 'stripe';
  // runMigrations logs and swallows its errors: check the result ourselves.
  await runMigrations({ databaseUrl, schema });
  const sync = new StripeSync({
    poolConfig: { connectionString: databaseUrl, max: 10 }, // the library's default pool size
    stripeSecretKey: 'sk_test_bench_peer_local_only',
    stripeWebhookSecret: secret,
  });
  const { rows } = await sync.postgresClient.query(`select to_regclass('${schema}.customers') as t`);
  if (!rows[0].t) throw new Error('migrations did not create stripe.customers');
  // The library builds its own Stripe client with no host option; replace it
  // with one that talks to stripe-mock (only used when an event needs a fetch).
  sync.stripe = new Stripe('sk_test_bench_peer_local_only', {
    host: stripeAPI.hostname,
    port: Number(stripeAPI.port),
    protocol: stripeAPI.protocol.replace(':', ''),
  });

  const server = http.createServer((req, res) => {
    if (req.method !== 'POST' || req.url !== '/webhooks') {
      res.writeHead(404).end();
      return;
    }
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > maxBody) {
        res.writeHead(413).end();
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', async () => {
      if (size > maxBody) return;
      try {
        await sync.processWebhook(Buffer.concat(chunks), req.headers['stripe-signature']);
        res.writeHead(200, { 'Content-Type': 'application/json' }).end('{"received":true}');
      } catch (err) {
        const bad = err && err.type === 'StripeSignatureVerificationError';
        res.writeHead(bad ? 400 : 500, { 'Content-Type': 'application/json' })
          .end(JSON.stringify({ error: String(err && err.message) }));
      }
    });
  });
  server.keepAliveTimeout = 65_000;
  server.listen(Number(listen.port), listen.hostname, () => {
    console.log(`peer: stripe-sync-engine listening on http://${listen.host}/webhooks`);
  });
  const stop = () => server.close(() => sync.postgresClient.pool.end().then(() => process.exit(0)));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((err) => {
  console.error('peer:', err);
  process.exit(1);
});
