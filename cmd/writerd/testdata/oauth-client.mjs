// The official MCP TypeScript SDK's client going through OAuth against
// writerd, for TestOAuth_TypeScriptClient: it connects without a token,
// is answered 401, discovers writerd's protected resource metadata and
// the issuer's metadata on its own, and hands over the authorization URL
// it built. Where a person would use a browser, this script follows that
// URL itself (the test issuer approves at once), gives the code back to
// the SDK, which exchanges it with PKCE for an access token, and calls
// create_project with it. It prints one JSON line per step on stdout.
//
// usage: node oauth-client.mjs SDK_DIR SERVER_URL
import { pathToFileURL } from 'node:url';

const [sdkDir, serverUrl] = process.argv.slice(2);
const sdk = (p) => import(pathToFileURL(`${sdkDir}/dist/esm/${p}`).href);
const { Client } = await sdk('client/index.js');
const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
const { UnauthorizedError } = await sdk('client/auth.js');

const say = (step, fields) => console.log(JSON.stringify({ step, ...fields }));
const redirectUrl = 'http://127.0.0.1:9/callback';
let tokens, verifier, authorizationUrl;
const provider = {
  get redirectUrl() { return redirectUrl; },
  get clientMetadata() {
    return { client_name: 'writerd-oauth-test', redirect_uris: [redirectUrl], grant_types: ['authorization_code'],
      response_types: ['code'], token_endpoint_auth_method: 'none' };
  },
  clientInformation() { return { client_id: 'ts-sdk-client' }; },
  tokens() { return tokens; },
  saveTokens(t) { tokens = t; },
  redirectToAuthorization(url) { authorizationUrl = url; },
  saveCodeVerifier(v) { verifier = v; },
  codeVerifier() { return verifier; },
};

const transport = new StreamableHTTPClientTransport(new URL(serverUrl), { authProvider: provider });
try {
  await new Client({ name: 'writerd-oauth-test', version: '1' }).connect(transport);
  say('error', { message: 'connected without authorization' });
  process.exit(1);
} catch (e) {
  if (!(e instanceof UnauthorizedError) || !authorizationUrl) {
    say('error', { message: String(e) });
    process.exit(1);
  }
}
say('authorize', { url: authorizationUrl.href });

// The browser's part: follow the authorization URL; the issuer redirects
// to the client's redirect URI with a code.
const res = await fetch(authorizationUrl, { redirect: 'manual' });
const code = new URL(res.headers.get('location')).searchParams.get('code');
await transport.finishAuth(code);
say('token', { token_type: tokens.token_type, scope: tokens.scope });

const client = new Client({ name: 'writerd-oauth-test', version: '1' });
await client.connect(new StreamableHTTPClientTransport(new URL(serverUrl), { authProvider: provider }));
const result = await client.callTool({ name: 'create_project', arguments: { idempotency_key: 'k-ts-sdk-0001', name: 'from-typescript' } });
say('call', { isError: result.isError ?? false, text: result.content?.[0]?.text ?? '' });
await client.close();
