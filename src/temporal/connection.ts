import { Client, Connection } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';

export async function createTemporalClient(address: string, namespace: string): Promise<Client> {
  const connection = await Connection.connect({ address });
  return new Client({ connection, namespace });
}

export async function createWorkerConnection(address: string): Promise<NativeConnection> {
  return NativeConnection.connect({ address });
}
