// The official MCP TypeScript SDK's client calling an upstream's writes
// through writerd, for TestUpstream_TypeScriptClient: over stdio (writerd
// started by the SDK's StdioClientTransport with the argv and environment
// given) or Streamable HTTP (a URL and a bearer token). It lists the tools,
// sends memory_create_entities twice with one key, then
// memory_delete_entities without confirm, and prints one JSON line per
// step on stdout.
//
// usage: node upstream-client.mjs SDK_DIR stdio ARGV_JSON ENV_JSON
//        node upstream-client.mjs SDK_DIR http URL TOKEN
import { pathToFileURL } from 'node:url';

const [sdkDir, mode, a, b] = process.argv.slice(2);
const sdk = (p) => import(pathToFileURL(`${sdkDir}/dist/esm/${p}`).href);
const { Client } = await sdk('client/index.js');
let transport;
if (mode === 'stdio') {
  const { StdioClientTransport } = await sdk('client/stdio.js');
  const argv = JSON.parse(a);
  transport = new StdioClientTransport({ command: argv[0], args: argv.slice(1), env: JSON.parse(b), stderr: 'ignore' });
} else {
  const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
  transport = new StreamableHTTPClientTransport(new URL(a), { requestInit: { headers: { Authorization: `Bearer ${b}` } } });
}
const say = (step, fields) => console.log(JSON.stringify({ step, ...fields }));
const client = new Client({ name: 'writerd-upstream-test', version: '1' });
await client.connect(transport);
const { tools } = await client.listTools();
say('list', { tools: tools.map((t) => t.name) });
const args = { idempotency_key: `ts-key-${mode}-0001`, entities: [{ name: `TS-${mode}`, entityType: 'test', observations: [] }] };
for (const step of ['create', 'retry']) {
  const r = await client.callTool({ name: 'memory_create_entities', arguments: args });
  say(step, { isError: r.isError ?? false, structured: r.structuredContent, replayed: r._meta?.['writerd/replayed'] ?? false });
}
const d = await client.callTool({ name: 'memory_delete_entities', arguments: { idempotency_key: `ts-key-${mode}-0002`, entityNames: [`TS-${mode}`] } });
say('delete', { isError: d.isError ?? false, text: d.content?.[0]?.text ?? '' });
await client.close();
