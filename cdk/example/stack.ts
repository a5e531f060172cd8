// The example's stack: the shipped msk-handler as a RustFunction, ExactlyOnce
// around it, for one source and one store of the tables below (and, for the
// drift check, a team's own table and destinations beside them: TEAM). app.ts makes
// one from the context (cdk synth -c source=sqs -c store=postgres);
// synth-all.ts makes every one (infra/cdk-check.sh).
import * as path from 'node:path';
import { App, Duration, Stack } from 'aws-cdk-lib';
import { Table } from 'aws-cdk-lib/aws-dynamodb';
import { EventBus } from 'aws-cdk-lib/aws-events';
import { Stream } from 'aws-cdk-lib/aws-kinesis';
import { Topic } from 'aws-cdk-lib/aws-sns';
import { Queue } from 'aws-cdk-lib/aws-sqs';
import { RustFunction } from 'cargo-lambda-cdk';
import { Destination, ExactlyOnce, ExactlyOnceProps, KafkaAuth, Source, Store } from '../src';

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
/**
 * The source-store pairs synthesized with a team's own resources too
 * (`<source>-<store>-team`: the same ARNs as configurations.json's
 * HandlerTableArns, HandlerDestinationArns and HandlerKafka*).
 */
export const TEAM = [['sqs', 'dynamodb']];

/** A handler's own table and one destination of each kind, by the variable it reads. */
function teamResources(stack: Stack): Pick<ExactlyOnceProps, 'tables' | 'destinations'> {
  const arn = (service: string, rest: string) => `arn:aws:${service}:${acct}:${rest}`;
  return {
    tables: { AUDIT_TABLE: Table.fromTableArn(stack, 'Audit', arn('dynamodb', 'table/audit')) },
    destinations: {
      ANNOUNCE_QUEUE_URL: Destination.queue(Queue.fromQueueArn(stack, 'Announced', arn('sqs', 'announced'))),
      ANNOUNCE_TOPIC_ARN: Destination.topic(Topic.fromTopicArn(stack, 'AnnouncedTopic', arn('sns', 'announced'))),
      ANNOUNCE_BUS_ARN: Destination.eventBus(EventBus.fromEventBusArn(stack, 'Bus', arn('events', 'event-bus/orders'))),
      ANNOUNCE_STREAM_ARN: Destination.stream(Stream.fromStreamArn(stack, 'AnnouncedStream', arn('kinesis', 'stream/announced'))),
      ANNOUNCE_KAFKA: Destination.mskTopic({ clusterArn: arn('kafka', 'cluster/orders/0123-abcd'), topic: 'announced',
        bootstrapServers: ['b-1.orders.example.com:9098'] }),
    },
  };
}

/** The example's stack in `app`, for `source` and `store` (names of the tables above), with a team's own resources if `team`. */
export function exampleStack(app: App, source: string, store: string, team = false): Stack {
  if (!sources[source] || !stores[store]) throw new Error(`unknown source ${source} or store ${store}`);
  const stack = new Stack(app, 'ExactlyOnceExample');
  const fn = new RustFunction(stack, 'Function', { manifestPath: path.join(__dirname, '..', '..'), binaryName: 'msk-handler',
    memorySize: 512, timeout: Duration.seconds(120) }); // the SAM template's: above a lease + the margin
  new ExactlyOnce(stack, 'ExactlyOnce', {
    function: fn, source: sources[source](), store: stores[store](), // Streams have no headers:
    keySource: ['kinesis', 'dynamodb-streams'].includes(source) ? 'json:/payment_id' : 'header',
    ...(team ? teamResources(stack) : {}),
  });
  return stack;
}
