// Every source x store synthesized offline (bundling skipped), checked
// against what the SAM template creates for the same configuration.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { App, Duration, Stack } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import { RustFunction } from 'cargo-lambda-cdk';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as events from 'aws-cdk-lib/aws-events';
import * as kinesis from 'aws-cdk-lib/aws-kinesis';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Destination, ExactlyOnce, ExactlyOnceProps, HANDLER_TABLE_ACTIONS, OnFailure, Source, Store } from '../src';

const acct = 'us-east-1:123456789012';
const secret = (n: string) => `arn:aws:secretsmanager:${acct}:secret:${n}-AbCdEf`;
const kafka = { topic: 'payments', consumerGroupId: 'group' };
const broker = `arn:aws:mq:${acct}:broker:payments:b-0123abcd-4567-89ab-cdef-0123456789ab`;
const sources: Record<string, () => Source> = {
  'kafka-msk': () => Source.msk({ ...kafka, clusterArn: `arn:aws:kafka:${acct}:cluster/payments/uuid-1` }),
  'kafka-self-managed': () => Source.selfManagedKafka({ ...kafka, bootstrapServers: ['b-1:9096'], secretArn: secret('k'), subnetIds: ['subnet-1', 'subnet-2'], securityGroupIds: ['sg-1'] }),
  'sqs': () => Source.sqs({ queueArn: `arn:aws:sqs:${acct}:payments` }),
  'sqs-fifo': () => Source.sqs({ queueArn: `arn:aws:sqs:${acct}:payments.fifo` }),
  'kinesis': () => Source.kinesis({ streamArn: `arn:aws:kinesis:${acct}:stream/payments` }),
  'dynamodb-streams': () => Source.dynamoDbStreams({ streamArn: `arn:aws:dynamodb:${acct}:table/t/stream/2026` }),
  'rabbitmq': () => Source.rabbitMq({ brokerArn: broker, queue: 'q', secretArn: secret('mq') }),
  'activemq': () => Source.activeMq({ brokerArn: broker, queue: 'q', secretArn: secret('mq') }),
};
const stores: Record<string, () => Store> = {
  'dynamodb': () => Store.newDynamoDbTable(),
  'dynamodb-existing': () => Store.existingDynamoDbTable('existing', { ledgerTableName: 'existing-ledger' }),
  'postgres': () => Store.postgres({ databaseUrl: 'postgres://db/payments', secretArn: secret('db') }),
  'redis': () => Store.redis({ url: 'rediss://cache:6379' }),
};
// The statements (Sid) per source and store, as docs/iam.md lists them.
const sourceSids: Record<string, string[]> = {
  'kafka-msk': ['KafkaCluster', 'KafkaTopic', 'KafkaGroup', 'DeadLetterQueue'],
  'kafka-self-managed': ['KafkaSecrets', 'KafkaVpc', 'DeadLetterQueue'],
  'sqs': ['SqsQueue'], 'sqs-fifo': ['SqsQueue'],
  'kinesis': ['KinesisStream', 'DeadLetterQueue'], 'dynamodb-streams': ['DynamoDbStream', 'DeadLetterQueue'],
  'rabbitmq': ['MqBroker', 'MqSecret', 'MqNetworkInterfaces', 'MqVpc'], 'activemq': ['MqBroker', 'MqSecret', 'MqNetworkInterfaces', 'MqVpc'],
};
const storeSids: Record<string, string[]> = {
  'dynamodb': ['IdempotencyStore', 'IdempotencyStartedIndex', 'Ledger'],
  'dynamodb-existing': ['IdempotencyStore', 'IdempotencyStartedIndex', 'Ledger'],
  'postgres': ['DatabaseSecret'], 'redis': [],
};
const lagAlarm: Record<string, string> = {
  'kafka-msk': 'OffsetLag', 'kafka-self-managed': 'OffsetLag', 'sqs': 'ApproximateAgeOfOldestMessage', 'sqs-fifo': 'ApproximateAgeOfOldestMessage',
  'kinesis': 'IteratorAge', 'dynamodb-streams': 'IteratorAge', 'rabbitmq': 'MessageReadyCount', 'activemq': 'QueueSize',
};

function synth(source: string, store: string, extra: Partial<ExactlyOnceProps> | ((stack: Stack) => Partial<ExactlyOnceProps>) = {}) {
  const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
  const stack = new Stack(app, 'Test');
  if (typeof extra === 'function') extra = extra(stack);
  const fn = new RustFunction(stack, 'Function', { manifestPath: path.join(__dirname, '..', '..'), binaryName: 'msk-handler',
    timeout: Duration.seconds(120) });
  const stream = source === 'kinesis' || source === 'dynamodb-streams';
  new ExactlyOnce(stack, 'EO', { function: fn, source: sources[source](), store: stores[store](), keySource: stream ? 'record-key' : 'header', ...extra });
  return Template.fromStack(stack);
}

function policy(t: Template): any[] {
  return Object.values(t.findResources('AWS::IAM::Policy')).flatMap((p: any) => p.Properties.PolicyDocument.Statement);
}

for (const source of Object.keys(sources)) {
  for (const store of Object.keys(stores)) {
    test(`${source} x ${store}`, () => {
      const t = synth(source, store);
      const mq = source === 'rabbitmq' || source === 'activemq';
      const retried = !mq && !source.startsWith('sqs');
      // Resources.
      t.resourceCountIs('AWS::DynamoDB::Table', store === 'dynamodb' ? 2 : 0);
      t.resourceCountIs('AWS::SQS::Queue', retried ? 2 : 1);
      t.resourceCountIs('AWS::Lambda::EventSourceMapping', 1);
      t.resourceCountIs('AWS::Events::Rule', 1);
      t.resourceCountIs('AWS::SNS::Topic', 1);
      t.resourceCountIs('AWS::CloudWatch::Dashboard', 1);
      t.hasResourceProperties('AWS::Logs::LogGroup', { RetentionInDays: 30 });
      t.hasResourceProperties('AWS::Events::Rule', { ScheduleExpression: 'rate(5 minutes)', State: 'ENABLED' });
      if (store === 'dynamodb') {
        t.hasResource('AWS::DynamoDB::Table', { DeletionPolicy: 'Retain', Properties: Match.objectLike({
          KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }], BillingMode: 'PAY_PER_REQUEST', DeletionProtectionEnabled: true,
          TimeToLiveSpecification: { AttributeName: 'expires_at', Enabled: true },
          PointInTimeRecoverySpecification: { PointInTimeRecoveryEnabled: true },
          GlobalSecondaryIndexes: [Match.objectLike({ IndexName: 'started' }), Match.objectLike({ IndexName: 'unsent' })] }) });
      }
      // The mapping's settings.
      const mapping: any = Object.values(t.findResources('AWS::Lambda::EventSourceMapping'))[0];
      const m = mapping.Properties;
      assert.deepEqual(m.FunctionResponseTypes, mq ? undefined : ['ReportBatchItemFailures']);
      assert.equal(m.BisectBatchOnFunctionError, retried ? true : undefined);
      assert.equal(m.MaximumRetryAttempts, retried ? 5 : undefined);
      assert.equal(m.MaximumRecordAgeInSeconds, retried ? -1 : undefined);
      assert.equal(!!m.DestinationConfig?.OnFailure?.Destination, retried);
      assert.equal(m.BatchSize, source === 'sqs-fifo' ? 10 : 100);
      assert.equal(m.MaximumBatchingWindowInSeconds, source === 'sqs-fifo' ? undefined : 1);
      assert.ok(mapping.DependsOn?.length, 'the mapping waits for the role and its policy');
      if (source.startsWith('kafka')) {
        assert.deepEqual(m.ProvisionedPollerConfig, { MinimumPollers: 1, MaximumPollers: 3 });
        assert.deepEqual(m.Topics, ['payments']);
        assert.equal(m.StartingPosition, 'TRIM_HORIZON');
      }
      if (source === 'kafka-self-managed') {
        assert.deepEqual(m.SourceAccessConfigurations.map((c: any) => c.Type), ['SASL_SCRAM_512_AUTH', 'VPC_SUBNET', 'VPC_SUBNET', 'VPC_SECURITY_GROUP']);
      }
      if (mq) assert.deepEqual(m.SourceAccessConfigurations, [{ Type: 'BASIC_AUTH', URI: secret('mq') }]);
      // The role's statements: exactly these Sids.
      const sids = policy(t).map((s) => s.Sid).sort();
      assert.deepEqual(sids, [...storeSids[store], ...sourceSids[source], 'ParkedRecordsQueue'].sort());
      // Alarms.
      const metrics = Object.values(t.findResources('AWS::CloudWatch::Alarm')).map((a: any) =>
        a.Properties.MetricName ?? a.Properties.Metrics.find((x: any) => x.MetricStat)?.MetricStat.Metric.MetricName);
      const expected = ['Parked', 'Errors', 'Throttles', lagAlarm[source], 'TakenOver', 'LockLost', 'StoreError', 'FailedClosed',
        'UnrecordedEffects', 'ScopeConflict', 'ClockSkewMs', 'StoreLatency', 'OldestStartedAgeSeconds', 'OldestUnsentAgeSeconds',
        ...(retried ? ['ApproximateNumberOfMessagesVisible'] : [])];
      assert.deepEqual(metrics.sort(), expected.sort());
      t.hasResourceProperties('AWS::CloudWatch::Alarm', { Namespace: 'MskExactlyOnce', MetricName: 'StoreLatency', ExtendedStatistic: 'p99',
        Threshold: 200, EvaluationPeriods: 3, DatapointsToAlarm: 3, TreatMissingData: 'notBreaching' });
    });
  }
}

test('IAM actions and resources', () => {
  const byId = (t: Template) => Object.fromEntries(policy(t).map((s) => [s.Sid, s]));
  const msk = byId(synth('kafka-msk', 'dynamodb', { keyPrefix: 'payments#' }));
  assert.deepEqual(msk.IdempotencyStore.Action, ['dynamodb:BatchGetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:PartiQLInsert', 'dynamodb:PartiQLUpdate']);
  assert.deepEqual(msk.IdempotencyStore.Condition, { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['payments#*'] } });
  assert.equal(msk.IdempotencyStartedIndex.Action, 'dynamodb:Query');
  assert.equal(msk.IdempotencyStartedIndex.Resource.length, 2);
  assert.deepEqual(msk.KafkaCluster.Action, ['kafka-cluster:Connect', 'kafka-cluster:DescribeClusterDynamicConfiguration']);
  assert.match(JSON.stringify(msk.KafkaTopic.Resource), /topic\/payments\/uuid-1\/payments/);
  assert.match(JSON.stringify(msk.KafkaGroup.Resource), /group\/payments\/uuid-1\/group/);
  const sqs = byId(synth('sqs', 'redis'));
  assert.equal(sqs.SqsQueue.Resource, `arn:aws:sqs:${acct}:payments`);
  const s3 = byId(synth('kinesis', 'dynamodb-existing', { onFailure: OnFailure.s3() }));
  assert.deepEqual(s3.FailedRecordsBucket.Action, ['s3:PutObject', 's3:ListBucket']);
  // Existing tables (a copied template's, kept): the statements name them.
  assert.match(JSON.stringify(s3.IdempotencyStore.Resource), /:table\/existing"/);
  assert.match(JSON.stringify(s3.Ledger.Resource), /:table\/existing-ledger"/);
  const pg = byId(synth('activemq', 'postgres'));
  assert.deepEqual(pg.MqNetworkInterfaces.Action, ['ec2:CreateNetworkInterface', 'ec2:DeleteNetworkInterface']);
  assert.match(JSON.stringify(pg.MqNetworkInterfaces.Resource), /:ec2:us-east-1:123456789012:\*/);
});

test('MSK role gets the MSK managed policy', () => {
  const role: any = Object.values(synth('kafka-msk', 'dynamodb').findResources('AWS::IAM::Role'))[0];
  const arns = JSON.stringify(role.Properties.ManagedPolicyArns);
  for (const p of ['AWSLambdaBasicExecutionRole', 'AWSXrayWriteOnlyAccess', 'AWSLambdaVPCAccessExecutionRole', 'AWSLambdaMSKExecutionRole']) assert.match(arns, new RegExp(p));
});

test('environment variables', () => {
  const fn: any = Object.values(synth('sqs', 'postgres').findResources('AWS::Lambda::Function'))[0];
  const env = fn.Properties.Environment.Variables;
  assert.equal(Object.keys(env).length, 43);
  assert.equal(env.IDEMPOTENCY_STORE, 'postgres');
  assert.equal(env.EVENT_SOURCES, 'sqs');
  assert.equal(env.DATABASE_SECRET_ARN, secret('db'));
  assert.equal(env.DYNAMODB_ATTEMPT_TIMEOUT_MS, '');
  assert.equal(env.LOCK_TIMEOUT_SECONDS, '30');
  assert.equal(env.RECORD_RETENTION_SECONDS, '691200');
  assert.equal(env.LEDGER_EVENTS_DESTINATION, '');
});

test('ledger announcements to an MSK topic: its destination, its statement, no queue', () => {
  const t = synth('kafka-msk', 'dynamodb', { ledgerEvents: 'kafka', ledgerEventsTopicName: 'ledger-events',
    ledgerEventsBootstrapServers: ['b-1.c.kafka.us-east-1.amazonaws.com:9098', 'b-2.c.kafka.us-east-1.amazonaws.com:9098'] });
  const fn: any = Object.values(t.findResources('AWS::Lambda::Function'))[0];
  assert.equal(fn.Properties.Environment.Variables.LEDGER_EVENTS_DESTINATION,
    'kafka://b-1.c.kafka.us-east-1.amazonaws.com:9098,b-2.c.kafka.us-east-1.amazonaws.com:9098/ledger-events?auth=iam');
  assert.equal(fn.Properties.Environment.Variables.LEDGER_EVENTS_QUEUE_URL, '');
  const topic = policy(t).find((s) => s.Sid === 'LedgerEventsTopic');
  assert.deepEqual(topic.Action, ['kafka-cluster:Connect', 'kafka-cluster:DescribeTopic', 'kafka-cluster:WriteData']);
  assert.match(JSON.stringify(topic.Resource), /topic\/payments\/uuid-1\/ledger-events/);
  assert.equal(Object.keys(t.findResources('AWS::SQS::Queue')).length, 2);
  assert.throws(() => synth('sqs', 'dynamodb', { ledgerEvents: 'kafka', ledgerEventsTopicName: 'e', ledgerEventsBootstrapServers: ['b:9098'] }), /MSK/);
  assert.throws(() => synth('kafka-msk', 'dynamodb', { ledgerEvents: 'kafka' }), /needs ledgerEventsTopicName/);
});

test('stuck-key check off: the rule DISABLED, no stuck-key alarms', () => {
  const t = synth('kinesis', 'dynamodb', { stuckKeyCheck: false });
  t.hasResourceProperties('AWS::Events::Rule', { State: 'DISABLED' });
  assert.equal(Object.keys(t.findResources('AWS::CloudWatch::Alarm', { Properties: { MetricName: 'OldestStartedAgeSeconds' } })).length, 0);
});

test('SAM rules a construct can check', () => {
  assert.throws(() => synth('kinesis', 'dynamodb', { keySource: 'header' }), /no headers/);
  assert.throws(() => synth('sqs', 'dynamodb', { onFailure: OnFailure.kafka('dead') }), /Kafka sources/);
});

test("a function timeout within a lease + the margin warns; the SAM template's 120 s does not", () => {
  const warned = (timeout?: Duration) => {
    const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
    const stack = new Stack(app, 'Test');
    const fn = new RustFunction(stack, 'Function', { manifestPath: path.join(__dirname, '..', '..'), binaryName: 'msk-handler', timeout });
    new ExactlyOnce(stack, 'EO', { function: fn, source: sources.sqs(), store: stores.dynamodb() });
    return Annotations.fromStack(stack).findWarning('*', Match.stringLikeRegexp('timeout')).length;
  };
  assert.equal(warned(Duration.seconds(35)), 1);
  assert.equal(warned(Duration.seconds(120)), 0);
  // The CDK's own default (3 s) is under the safety margin: nothing would start.
  assert.throws(() => warned(), /safetyMarginMs \(5000\) leaves nothing of the function's 3 s timeout/);
});

test('combinations that cannot work are refused at synth, each naming the setting and the fix', () => {
  const refused = (source: string, extra: Partial<ExactlyOnceProps>, timeout = Duration.seconds(120)) => {
    const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
    const stack = new Stack(app, 'Test');
    const fn = new RustFunction(stack, 'Function', { manifestPath: path.join(__dirname, '..', '..'), binaryName: 'msk-handler', timeout });
    const stream = source === 'kinesis' || source === 'dynamodb-streams';
    return () => new ExactlyOnce(stack, 'EO', { function: fn, source: sources[source](), keySource: stream ? 'record-key' : 'header', ...extra });
  };
  // Retries, record age and destinations: Kafka, Kinesis and DynamoDB Streams only.
  assert.throws(refused('sqs', { retryAttempts: 3 }), /retryAttempts: not a setting of a sqs mapping.*redrive policy \(maxReceiveCount\)/);
  assert.throws(refused('rabbitmq', { maxRecordAge: Duration.hours(1), onFailure: OnFailure.s3() }), /maxRecordAge, onFailure: not a setting of a rabbitmq mapping.*redelivery limit/);
  assert.doesNotThrow(refused('kinesis', { retryAttempts: 3, maxRecordAge: Duration.hours(1) }));
  // A Kafka or Amazon MQ mapping invokes for at most 14 minutes; SQS for 15.
  assert.throws(refused('kafka-msk', {}, Duration.minutes(15)), /timeout \(900 s\) is over the 840 s a kafka mapping allows/);
  assert.throws(refused('activemq', {}, Duration.minutes(15)), /840 s a activemq mapping allows/);
  assert.doesNotThrow(refused('kafka-msk', {}, Duration.minutes(14)));
  assert.doesNotThrow(refused('sqs', {}, Duration.minutes(15)));
  // A margin as long as the timeout; a lease renewed within a store's latency; a window over 5 minutes.
  assert.throws(refused('sqs', { safetyMarginMs: 120000 }), /safetyMarginMs \(120000\) leaves nothing/);
  assert.throws(refused('sqs', { lockTimeout: Duration.millis(500) }), /lockTimeout \(500 ms\)/);
  assert.throws(refused('kinesis', { maxBatchingWindow: Duration.minutes(6) }), /maxBatchingWindow \(360 s\)/);
  // An SQS queue's visibility timeout, when given: at least 6 x the timeout + the window.
  const queue = (visibilityTimeout: Duration) => Source.sqs({ queueArn: `arn:aws:sqs:${acct}:payments`, visibilityTimeout });
  assert.throws(refused('sqs', { source: queue(Duration.seconds(720)) }), /visibility timeout \(720 s\) is under 6 x the function's timeout \+ the batching window \(721 s\)/);
  assert.doesNotThrow(refused('sqs', { source: queue(Duration.seconds(721)) }));
});

test("a team's own tables and destinations: a variable each, their grants, the features its build needs, no demo variable", () => {
  const t = synth('rabbitmq', 'dynamodb', (stack) => {
    const orders = new dynamodb.Table(stack, 'Orders', { partitionKey: { name: 'order_id', type: dynamodb.AttributeType.STRING } });
    return {
      store: Store.newDynamoDbTable({ demoLedger: false }),
      tables: { ORDERS_TABLE: orders },
      destinations: {
        ORDER_EVENTS_BUS: Destination.eventBus(new events.EventBus(stack, 'Bus')),
        ORDER_TOPIC: Destination.topic(new sns.Topic(stack, 'Topic')),
        ORDER_QUEUE: Destination.queue(new sqs.Queue(stack, 'Queue')),
        ORDER_STREAM: Destination.stream(new kinesis.Stream(stack, 'Stream')),
        ORDER_KAFKA: Destination.mskTopic({ clusterArn: `arn:aws:kafka:${acct}:cluster/orders/uuid-2`, topic: 'orders',
          bootstrapServers: ['b-1:9098'] }),
      },
    };
  });
  const fn: any = Object.values(t.findResources('AWS::Lambda::Function')).find((f: any) => f.Properties.Environment?.Variables?.EVENT_SOURCES);
  const env = fn.Properties.Environment.Variables;
  assert.deepEqual(Object.keys(env).filter((k) => k.startsWith('LEDGER_')), [], 'no demo variable');
  assert.match(env.ORDERS_TABLE.Ref, /^Orders/);
  assert.match(JSON.stringify(env.ORDER_EVENTS_BUS), /Bus.*Arn/);
  assert.match(JSON.stringify(env.ORDER_TOPIC), /"Ref":"Topic/);
  assert.match(JSON.stringify(env.ORDER_QUEUE), /"Ref":"Queue/);
  assert.match(JSON.stringify(env.ORDER_STREAM), /Stream.*Arn/);
  assert.equal(env.ORDER_KAFKA, 'kafka://b-1:9098/orders?auth=iam');
  // The grants: each resource gets its actions, and the demo ledger none.
  const statements = policy(t);
  const on = (pattern: RegExp) => statements.filter((s) => pattern.test(JSON.stringify(s.Resource))).flatMap((s) => [s.Action].flat()).sort();
  // Exactly the SAM pieces' HandlerTables and HandlerDestinations actions.
  assert.deepEqual(on(/Orders/), [...HANDLER_TABLE_ACTIONS].sort());
  assert.deepEqual(on(/Bus/), ['events:PutEvents']);
  assert.deepEqual(on(/"Ref":"Topic/), ['sns:Publish']);
  assert.deepEqual(on(/"Queue[0-9A-F]+"/), ['sqs:SendMessage']);
  assert.deepEqual(on(/Stream/), ['kinesis:PutRecords']);
  // ... as sam/exactly-once.yaml lists them.
  const pieces = fs.readFileSync(path.join(__dirname, '..', '..', 'sam', 'exactly-once.yaml'), 'utf8');
  const samTables = pieces.split('Sid: HandlerTables')[1].split('Resource:')[0].match(/dynamodb:\w+/g);
  assert.deepEqual([...samTables!].sort(), [...HANDLER_TABLE_ACTIONS].sort());
  const samDestinations = pieces.split('Sid: HandlerDestinations')[1].split('Resource:')[0].match(/\w+:\w+/g);
  assert.deepEqual([...samDestinations!].sort(), ['events:PutEvents', 'kinesis:PutRecords', 'sns:Publish', 'sqs:SendMessage']);
  assert.deepEqual(on(/topic\/orders\/uuid-2\/orders/), ['kafka-cluster:Connect', 'kafka-cluster:DescribeTopic', 'kafka-cluster:WriteData']);
  assert.equal(statements.filter((s) => s.Sid === 'Ledger').length, 0);
  t.resourceCountIs('AWS::DynamoDB::Table', 2); // the idempotency table and the team's
});

test('the cargo features a configuration needs, and a variable of ours refused as a team\'s', () => {
  const features = (source: string, store: string, extra: Partial<ExactlyOnceProps> = {}) => {
    const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
    const stack = new Stack(app, 'Test');
    const fn = new RustFunction(stack, 'Function', { manifestPath: path.join(__dirname, '..', '..'), binaryName: 'msk-handler',
      timeout: Duration.seconds(120) });
    const eo = new ExactlyOnce(stack, 'EO', { function: fn, source: sources[source](), store: stores[store](), ...extra });
    const said = Annotations.fromStack(stack).findInfo('*', Match.stringLikeRegexp('exactly-once:features'));
    assert.equal(said.length, 1);
    assert.match(String(said[0].entry.data), new RegExp(JSON.stringify(eo.cargoFeatures).replace(/[[\]]/g, '\\$&')));
    return eo.cargoFeatures;
  };
  assert.deepEqual(features('sqs', 'dynamodb'), ['sqs']);
  assert.deepEqual(features('sqs', 'postgres', { tracingExport: 'otlp' }), ['opentelemetry', 'postgres', 'sqs']);
  assert.deepEqual(features('kafka-msk', 'dynamodb', { duplicateCache: { url: 'rediss://c:6379' } }), ['redis', 'sqs']);
  assert.throws(() => synth('sqs', 'dynamodb', (stack) => ({ tables: { IDEMPOTENCY_TABLE: new dynamodb.Table(stack, 'T', {
    partitionKey: { name: 'id', type: dynamodb.AttributeType.STRING } }) } })), /IDEMPOTENCY_TABLE is a variable the construct sets/);
  assert.throws(() => synth('sqs', 'redis', { store: Store.redis({ url: 'redis://c', demoLedger: false }), ledgerMode: 'direct' }), /demo ledger/);
});

test('demoLedger false leaves out every demo variable on every store', () => {
  const off: Record<string, Store> = {
    'dynamodb': Store.newDynamoDbTable({ demoLedger: false }),
    'dynamodb-existing': Store.existingDynamoDbTable('existing', { demoLedger: false }),
    'postgres': Store.postgres({ databaseUrl: 'postgres://db/payments', secretArn: secret('db'), demoLedger: false }),
    'redis': Store.redis({ url: 'rediss://cache:6379', demoLedger: false }),
  };
  for (const [name, store] of Object.entries(off)) {
    const fn: any = Object.values(synth('sqs', name, { store }).findResources('AWS::Lambda::Function'))[0];
    const env = fn.Properties.Environment.Variables;
    assert.deepEqual(Object.keys(env).filter((k) => k.startsWith('LEDGER_')), [], name);
    assert.equal(Object.keys(env).length, 38, name);
  }
});
