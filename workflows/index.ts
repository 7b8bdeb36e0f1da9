export { smokeWorkflow } from './smoke';
export { taskWorkflow } from './task';
