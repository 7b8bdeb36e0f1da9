export { smokeWorkflow } from './smoke';
export { chatCompletionWorkflow, taskWorkflow } from './task';
export { webhookDeliveryWorkflow } from './webhook';
// Canaries and verification runs run as the task workflow (workflows/platform.ts); these two stay
// registered while workflows they started before may still run (a canary or a run waits at most its
// task's timeout, a run's third run as long again): they can go one release later.
export { canaryWorkflow } from './canary';
export { redundantRunWorkflow } from './redundant';
export { crawlWorkflow } from './crawl';
