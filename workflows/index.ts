export { smokeWorkflow } from './smoke';
export { chatCompletionWorkflow, taskWorkflow } from './task';
export { webhookDeliveryWorkflow } from './webhook';
export { canaryWorkflow } from './canary';
export { redundantRunWorkflow } from './redundant';
export { crawlWorkflow } from './crawl';
