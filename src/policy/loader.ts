import fs from 'node:fs';
import { DomainPolicyFile, type DomainPolicy } from './domain-policy';

export class DomainPolicyFileError extends Error {}

/** Reads and validates the policy file; the error names the file and every problem in it. */
export function readDomainPolicy(file: string): DomainPolicy {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    throw new DomainPolicyFileError(
      `cannot read the domain policy file ${file} (DOMAIN_POLICY_FILE): ${(error as Error).message}`,
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new DomainPolicyFileError(`the domain policy file ${file} is not valid JSON: ${(error as Error).message}`);
  }
  const parsed = DomainPolicyFile.safeParse(json);
  if (!parsed.success) {
    const problems = parsed.error.issues
      .map((issue) => `${issue.path.join('.') || '(root)'}: ${issue.message}`)
      .join('; ');
    throw new DomainPolicyFileError(`the domain policy file ${file} is invalid: ${problems}`);
  }
  return parsed.data;
}
