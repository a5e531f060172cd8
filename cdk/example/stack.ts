// The example's stack: the shipped msk-handler as a RustFunction, ExactlyOnce
// around it, for one source and one store of the tables below. app.ts makes
// one from the context (cdk synth -c source=sqs -c store=postgres);
// synth-all.ts makes every one (infra/cdk-check.sh).
import * as path from 'node:path';
import { App, Duration, Stack } from 'aws-cdk-lib';
import { RustFunction } from 'cargo-lambda-cdk';
import { ExactlyOnce, KafkaAuth, Source, Store } from '../src';

const acct = 'us-east-1:123456789012', secret = (name: string) => `arn:aws:secretsmanager:${acct}:secret:${name}-AbCdEf`;
const kafka = { topic: 'payments', consumerGroupId: 'payments-consumer' };
const sources: Record<string, () => Source> = {
  'kafka-msk': () => Source.msk({ ...kafka, clusterArn: `arn:aws:kafka:${acct}:cluster/payments/0123-abcd` }),
  'kafka-self-managed': () => Source.selfManagedKafka({ ...kafka, bootstrapServers: ['b-1.example.com:9096'],
    secretArn: secret('kafka'), auth: KafkaAuth.SASL_SCRAM_512_AUTH, subnetIds: ['subnet-0a'], securityGroupIds: ['sg-0a'] }),
  'sqs': () => Source.sqs({ queueArn: `arn:aws:sqs:${acct}:payments` }),
  'sqs-fifo': () => Source.sqs({ queueArn: `arn:aws:sqs:${acct}:payments.fifo` }),
  'kinesis': () => Source.kinesis({ streamArn: `arn:aws:kinesis:${acct}:stream/payments` }),
  'dynamodb-streams': () => Source.dynamoDbStreams({ streamArn: `arn:aws:dynamodb:${acct}:table/payments/stream/2026-01-01T00:00:00.000` }),
  'rabbitmq': () => Source.rabbitMq({ brokerArn: `arn:aws:mq:${acct}:broker:payments:b-0123abcd-4567-89ab-cdef-0123456789ab`, queue: 'payments', secretArn: secret('mq') }),
  'activemq': () => Source.activeMq({ brokerArn: `arn:aws:mq:${acct}:broker:payments:b-0123abcd-4567-89ab-cdef-0123456789ab`, queue: 'payments', secretArn: secret('mq') }),
};
const stores: Record<string, () => Store> = {
  'dynamodb': () => Store.newDynamoDbTable(),
  'dynamodb-existing': () => Store.existingDynamoDbTable('payments-idempotency', { ledgerTableName: 'payments-ledger' }),
  'postgres': () => Store.postgres({ databaseUrl: 'postgres://payments.proxy.example.com/payments', secretArn: secret('db') }),
  'redis': () => Store.redis({ url: 'rediss://payments.cache.example.com:6379' }),
};
/** Every source and store the example takes, by name. */
export const SOURCES = Object.keys(sources);
export const STORES = Object.keys(stores);

/** The example's stack in `app`, for `source` and `store` (names of the tables above). */
export function exampleStack(app: App, source: string, store: string): Stack {
  if (!sources[source] || !stores[store]) throw new Error(`unknown source ${source} or store ${store}`);
  const stack = new Stack(app, 'ExactlyOnceExample');
  const fn = new RustFunction(stack, 'Function', { manifestPath: path.join(__dirname, '..', '..'), binaryName: 'msk-handler',
    memorySize: 512, timeout: Duration.seconds(120) }); // the SAM template's: above a lease + the margin
  new ExactlyOnce(stack, 'ExactlyOnce', {
    function: fn, source: sources[source](), store: stores[store](), // Streams have no headers:
    keySource: ['kinesis', 'dynamodb-streams'].includes(source) ? 'json:/payment_id' : 'header',
  });
  return stack;
}
