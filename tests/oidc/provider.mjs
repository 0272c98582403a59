// A real OpenID Connect provider for Gantry's SSO tests: panva's oidc-provider,
// with our own minimal login and consent pages instead of its development
// interactions (which accept any password).
//
// Started by tests/accounts/test_oidc.py as its own process:
//   node provider.mjs
// configured by environment variables:
//   OIDC_TEST_USERS     JSON file {username: {password, sub, email, given_name, family_name, groups}};
//                       read on every request, so a test can change someone's groups
//   OIDC_TEST_JWKS      JSON file {keys: [private RSA JWK]}: the signing key
//   OIDC_TEST_CLIENT_ID, OIDC_TEST_CLIENT_SECRET
//   OIDC_TEST_REDIRECT_URIS, OIDC_TEST_POST_LOGOUT_REDIRECT_URIS   comma-separated
//   OIDC_TEST_RESOURCES JSON {resource indicator: audience}: JWT access tokens for APIs
// It listens on 127.0.0.1 on a free port and prints "READY <issuer>" once it answers.

import { readFileSync } from 'node:fs';
import http from 'node:http';
import Provider, { errors } from 'oidc-provider';

const env = (name) => {
  const value = process.env[name];
  if (value === undefined) {
    console.error(`provider.mjs: ${name} is not set`);
    process.exit(2);
  }
  return value;
};

const usersFile = env('OIDC_TEST_USERS');
const users = () => JSON.parse(readFileSync(usersFile, 'utf8'));
const accountBySub = (sub) => Object.entries(users()).find(([, u]) => u.sub === sub);
const resources = JSON.parse(process.env.OIDC_TEST_RESOURCES || '{}');

const escape = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const page = (title, body) => `<!doctype html><html><head><meta charset="utf-8"><title>${escape(title)}</title></head>
<body><h1>${escape(title)}</h1>${body}</body></html>`;

const server = http.createServer();
server.listen(0, '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients: [{
      client_id: env('OIDC_TEST_CLIENT_ID'),
      client_secret: env('OIDC_TEST_CLIENT_SECRET'),
      redirect_uris: env('OIDC_TEST_REDIRECT_URIS').split(','),
      post_logout_redirect_uris: env('OIDC_TEST_POST_LOGOUT_REDIRECT_URIS').split(','),
      response_types: ['code'],
      grant_types: ['authorization_code'],
      token_endpoint_auth_method: 'client_secret_post',
      id_token_signed_response_alg: 'RS256',
    }],
    jwks: JSON.parse(readFileSync(env('OIDC_TEST_JWKS'), 'utf8')),
    cookies: { keys: ['gantry-test-provider-cookie-key'] },
    scopes: ['openid', 'email', 'profile', 'groups'],
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['preferred_username', 'name', 'given_name', 'family_name'],
      groups: ['groups'],
    },
    pkce: { required: () => true },
    async findAccount(ctx, sub) {
      const found = accountBySub(sub);
      if (!found) return undefined;
      const [username, user] = found;
      return {
        accountId: sub,
        async claims() {
          return {
            sub,
            preferred_username: username,
            email: user.email,
            email_verified: true,
            given_name: user.given_name,
            family_name: user.family_name,
            name: `${user.given_name} ${user.family_name}`,
            groups: user.groups,
          };
        },
      };
    },
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    features: {
      devInteractions: { enabled: false },
      rpInitiatedLogout: {
        enabled: true,
        logoutSource: async (ctx, form) => {
          ctx.body = page('Sign out?', `${form}<button type="submit" form="op.logoutForm" name="logout" value="yes">Sign out</button>`);
        },
        postLogoutSuccessSource: async (ctx) => { ctx.body = page('Signed out', ''); },
      },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => undefined,
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, indicator) => {
          if (!(indicator in resources)) throw new errors.InvalidTarget();
          return {
            scope: 'api',
            audience: resources[indicator],
            accessTokenFormat: 'jwt',
            accessTokenTTL: 600,
            jwt: { sign: { alg: 'RS256' } },
          };
        },
      },
    },
    renderError: async (ctx, out) => {
      ctx.type = 'html';
      ctx.body = page('Error', `<p class="error">${escape(out.error)}: ${escape(out.error_description || '')}</p>`);
    },
  });

  const readForm = (req) => new Promise((resolve, reject) => {
    let body = '';
    req.on('data', (chunk) => { body += chunk; });
    req.on('end', () => resolve(new URLSearchParams(body)));
    req.on('error', reject);
  });

  const loginForm = (uid, error = '') => page('Sign in to the test provider', `
    ${error ? `<p class="error">${escape(error)}</p>` : ''}
    <form method="post" action="/interaction/${escape(uid)}/login">
      <input name="username" autofocus><input name="password" type="password">
      <button type="submit">Sign in</button>
    </form>`);

  const consentForm = (uid, details) => page('Authorize', `
    <p>Share ${escape([...(details.missingOIDCScope || [])].join(' '))} with ${escape(details.clientId || 'the application')}?</p>
    <form method="post" action="/interaction/${escape(uid)}/confirm"><button type="submit">Allow</button></form>
    <form method="post" action="/interaction/${escape(uid)}/abort"><button type="submit">Deny</button></form>`);

  async function interaction(req, res, uid, action) {
    const details = await provider.interactionDetails(req, res);
    if (details.uid !== uid) throw new errors.SessionNotFound('interaction mismatch');
    const send = (status, html) => {
      res.writeHead(status, { 'Content-Type': 'text/html; charset=utf-8' });
      res.end(html);
    };
    if (req.method === 'GET' && !action) {
      if (details.prompt.name === 'login') return send(200, loginForm(uid));
      return send(200, consentForm(uid, { ...details.prompt.details, clientId: details.params.client_id }));
    }
    if (req.method !== 'POST') return send(405, page('Method not allowed', ''));
    if (action === 'login') {
      const form = await readForm(req);
      const user = users()[form.get('username') || ''];
      if (!user || user.password !== form.get('password')) {
        return send(401, loginForm(uid, 'Invalid username or password.'));
      }
      return provider.interactionFinished(req, res, { login: { accountId: user.sub } }, { mergeWithLastSubmission: false });
    }
    if (action === 'confirm') {
      const { prompt: { details: missing }, params, session: { accountId } } = details;
      const grant = details.grantId
        ? await provider.Grant.find(details.grantId)
        : new provider.Grant({ accountId, clientId: params.client_id });
      if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
      if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
      if (missing.missingResourceScopes) {
        for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes)) {
          grant.addResourceScope(indicator, scopes.join(' '));
        }
      }
      const grantId = await grant.save();
      return provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
    }
    if (action === 'abort') {
      return provider.interactionFinished(req, res, {
        error: 'access_denied', error_description: 'The user denied access.',
      }, { mergeWithLastSubmission: false });
    }
    return send(404, page('Not found', ''));
  }

  const oidc = provider.callback();
  server.on('request', async (req, res) => {
    const match = req.url.match(/^\/interaction\/([\w-]+)(?:\/(login|confirm|abort))?\/?$/);
    if (!match) return oidc(req, res);
    try {
      await interaction(req, res, match[1], match[2]);
    } catch (err) {
      res.writeHead(400, { 'Content-Type': 'text/html; charset=utf-8' });
      res.end(page('Error', `<p class="error">${escape(err.message)}</p>`));
    }
  });
  provider.on('server_error', (ctx, err) => console.error('server_error', err));
  console.log(`READY ${issuer}`);
});
