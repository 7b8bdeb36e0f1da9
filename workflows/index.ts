export { smokeWorkflow } from './smoke';
