import { loadConfig } from '../config';
import { createLogger, logFormatOf } from '../logger';
import { startApiNode } from '../runtime/api-node';
import { startInfrastructure, writeStackFile } from '../runtime/infrastructure';
import { createDb } from '../db/pool';
import { awaitLocalProbation, fundLocalPlatform, markLocalVerifier, startLocalSolver } from '../runtime/local-solver';
import { startWorkerNode } from '../runtime/worker-node';
import { checkFundingProblem, warnIfChecksUnfunded } from '../trust/check-funding';
import { exitOnStartupError, onShutdown } from './shutdown';

/**
 * `npm start`: everything on one machine. Embedded PostgreSQL and Temporal dev server (unless
 * DATABASE_URL / TEMPORAL_ADDRESS point elsewhere), migrations, one API node, one worker and, unless
 * LOCAL_SOLVER=off, the reference solver agent in-process.
 */
async function main() {
  const config = loadConfig();
  const logger = createLogger(config.logLevel, 'stack', config.logFormat);
  const stops: (() => Promise<void>)[] = [];
  let stopping: Promise<void> | undefined;
  const stopAll = () =>
    (stopping ??= (async () => {
      for (const stop of stops.reverse()) await stop().catch((error) => logger.warn({ err: error }, 'stop failed'));
    })());
  // From the start: Ctrl-C (or a closed terminal) while the stack is still starting stops what has started.
  // Its embedded servers run in their own process groups and would otherwise outlive it, holding DATA_DIR;
  // on our exit, those not yet handed over are asked to stop too.
  onShutdown(logger, stopAll, ['SIGINT', 'SIGTERM', 'SIGHUP']);
  try {
    const infra = await startInfrastructure(config, logger);
    stops.push(infra.stop);
    writeStackFile(config, infra);
    // Stopped in reverse order: the API lets its requests in flight finish while the workflows still run.
    const worker = await startWorkerNode({
      config,
      logger,
      databaseUrl: infra.databaseUrl,
      temporalAddress: infra.temporalAddress,
    });
    stops.push(worker.close);
    // The console links tasks to the embedded server's UI unless TEMPORAL_UI_URL names another.
    const apiConfig = { ...config, temporalUiUrl: config.temporalUiUrl ?? (infra.temporalUiUrl || undefined) };
    // The platform account is funded below (with the bundled solver) before its standing is told.
    const api = await startApiNode({
      config: apiConfig,
      logger,
      databaseUrl: infra.databaseUrl,
      temporalAddress: infra.temporalAddress,
      warnUnfundedChecks: false,
    });
    stops.push(api.close);
    // Last to start, first to stop: its running attempts finish while the API and worker are still up.
    // Like any new solver it is on probation (TRUST_PROBATION_CANARIES): its canaries are paid from the
    // platform account, funded here, and the banner waits for them. It verifies the other solvers' work.
    // Without it, the platform account is the operator's to fund: the banner says whether it can pay the checks.
    const db = await createDb(infra.databaseUrl, { maximumPoolSize: 2 });
    if (config.localSolver) await fundLocalPlatform(db, logger);
    const solver = config.localSolver ? await startLocalSolver({ config, apiUrl: api.url, logger }) : undefined;
    if (solver) stops.push(solver.stop);
    if (solver) await markLocalVerifier(db, solver.solverId, logger);
    if (solver && config.trust.probationCanaries > 0)
      await awaitLocalProbation(db, config.trust, solver.solverId, logger);
    const funding = await warnIfChecksUnfunded(db, config.trust, logger);
    await db.end();
    const platform = checkFundingProblem(config.trust, funding);
    const lines = [
      '',
      `  API           ${api.url}`,
      `  API docs      ${api.url}/docs`,
      `  Console       ${api.url}/console${config.adminApiKey ? ' (sign in with ADMIN_API_KEY, or a client or solver key)' : ' (client and solver keys; set ADMIN_API_KEY for the operator views)'}`,
      ...(infra.temporalUiUrl
        ? [
            `  Temporal UI   ${infra.temporalUiUrl}${infra.temporalUiPortTaken ? ` (port ${infra.temporalUiPortTaken} was taken; TEMPORAL_UI_PORT picks another)` : ''}`,
          ]
        : [`  Temporal      ${infra.temporalAddress}`]),
      solver
        ? `  Local solver  serving ${solver.taskTypes.join(', ')} as ${solver.solverId}`
        : '  Local solver  off (LOCAL_SOLVER=off)',
      ...(solver && !solver.taskTypes.includes('screenshot')
        ? [
            `  Browser tasks off (screenshot, page_snapshot): no Chromium at ${solver.chromiumPath}; ` +
              `run \`sudo apt-get install chromium\` and start again`,
          ]
        : []),
      ...(config.trust.probationCanaries > 0 && !config.trust.pageCanaries
        ? [
            '  Canary pages  off (ALLOW_PRIVATE_NETWORKS=false, no CANARY_HOSTS): fetches, snapshots ' +
              'and screenshots have no canaries and no probation',
          ]
        : []),
      ...(platform
        ? [
            platform.level === 'unfunded'
              ? `  Platform      UNFUNDED: ${funding.available_points} points available, a check holds ${funding.check_price_points}; ${config.trust.probationCanaries > 0 ? 'new solvers stay on probation and serve nobody' : 'solvers go unchecked'}. Deposit at least ${funding.recommended_points} ` +
                `points to account "${funding.account_id}" (README, "Deployment")`
              : `  Platform      ${funding.available_points} points available: a new solver's checks run ` +
                `one at a time; ${funding.recommended_points} hold them at once (README, "Deployment")`,
          ]
        : []),
      ...(config.adminApiKey
        ? []
        : ['  Admin         off: set ADMIN_API_KEY (e.g. in .env) to deposit points into accounts']),
      `  Data          ${config.dataDir}`,
      '',
      '  Ctrl-C stops everything.',
      '',
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
  } catch (error) {
    // A start-up cut short by a stop request is not a failure: the shutdown handler exits when done.
    const asked = stopping !== undefined;
    await stopAll();
    if (!asked) throw error;
  }
}

main().catch(exitOnStartupError(createLogger('info', 'stack', logFormatOf(undefined))));
