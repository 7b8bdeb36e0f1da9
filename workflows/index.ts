export { smokeWorkflow } from './smoke';
export { chatCompletionWorkflow, taskWorkflow } from './task';
