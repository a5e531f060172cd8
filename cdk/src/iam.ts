// The function role's statements, one per Sid of the SAM template's
// FunctionRolePolicy1, each only where the template's condition holds.
import { Fn, Stack } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import { Construct } from 'constructs';
import { Source } from './source';

/** What the statements name, resolved by the construct. */
export interface Grants {
  readonly source: Source;
  readonly tableArn?: string;
  readonly keyPrefix: string;
  readonly ledgerTableArn?: string;
  readonly postgres?: any;
  readonly ledgerEventsQueueArn?: string;
  readonly ledgerEventsKafkaTopic?: string;
  readonly deadLetterQueueArn?: string;
  readonly failedRecordsBucketArn?: string;
  readonly failureTopicArn?: string;
  readonly failureKafkaTopic?: string;
  readonly parkedRecordsQueueArn: string;
}

function allow(sid: string, actions: string[], resources: string[], conditions?: Record<string, any>) {
  return new iam.PolicyStatement({ sid, actions, resources, conditions });
}

/** arn:PARTITION:kafka:REGION:ACCOUNT:KIND/NAME/UUID/RESOURCE, NAME and UUID from the cluster's ARN. */
export function kafkaArn(scope: Construct, clusterArn: string, kind: string, resource: string): string {
  const s = Stack.of(scope);
  const name = Fn.select(1, Fn.split('/', clusterArn));
  const uuid = Fn.select(2, Fn.split('/', clusterArn));
  return `arn:${s.partition}:kafka:${s.region}:${s.account}:${kind}/${name}/${uuid}/${resource}`;
}

export function statements(scope: Construct, g: Grants): iam.PolicyStatement[] {
  const s = Stack.of(scope);
  const out: iam.PolicyStatement[] = [];
  const p = g.source.props;
  if (g.tableArn) {
    out.push(allow('IdempotencyStore',
      ['dynamodb:BatchGetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:PartiQLInsert', 'dynamodb:PartiQLUpdate'],
      [g.tableArn],
      g.keyPrefix ? { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [`${g.keyPrefix}*`] } } : undefined));
    out.push(allow('IdempotencyStartedIndex', ['dynamodb:Query'],
      [`${g.tableArn}/index/started`, `${g.tableArn}/index/unsent`]));
  }
  if (g.ledgerTableArn) out.push(allow('Ledger', ['dynamodb:UpdateItem'], [g.ledgerTableArn]));
  if (g.postgres?.secretArn) out.push(allow('DatabaseSecret', ['secretsmanager:GetSecretValue'], [g.postgres.secretArn]));
  if (g.postgres?.iamAuth) {
    const { resourceId, user } = g.postgres.iamAuth;
    out.push(allow('DatabaseIamAuth', ['rds-db:connect'],
      [`arn:${s.partition}:rds-db:${s.region}:${s.account}:dbuser:${resourceId}/${user}`]));
  }
  if (g.ledgerEventsQueueArn) out.push(allow('LedgerEvents', ['sqs:SendMessage'], [g.ledgerEventsQueueArn]));
  if (g.ledgerEventsKafkaTopic && g.source.kind === 'kafka-msk') {
    out.push(allow('LedgerEventsTopic', ['kafka-cluster:Connect', 'kafka-cluster:DescribeTopic', 'kafka-cluster:WriteData'],
      [p.clusterArn, kafkaArn(scope, p.clusterArn, 'topic', g.ledgerEventsKafkaTopic)]));
  }
  if (g.deadLetterQueueArn) out.push(allow('DeadLetterQueue', ['sqs:SendMessage'], [g.deadLetterQueueArn]));
  if (g.failedRecordsBucketArn) {
    out.push(allow('FailedRecordsBucket', ['s3:PutObject', 's3:ListBucket'],
      [g.failedRecordsBucketArn, `${g.failedRecordsBucketArn}/*`],
      { StringEquals: { 's3:ResourceAccount': s.account } }));
  }
  if (g.failureTopicArn) out.push(allow('FailureTopic', ['sns:Publish'], [g.failureTopicArn]));
  if (g.failureKafkaTopic && g.source.kind === 'kafka-msk') {
    out.push(allow('KafkaFailureTopic',
      ['kafka-cluster:DescribeCluster', 'kafka-cluster:DescribeTopic', 'kafka-cluster:WriteData'],
      [p.clusterArn, kafkaArn(scope, p.clusterArn, 'topic', g.failureKafkaTopic)]));
  }
  out.push(allow('ParkedRecordsQueue', ['sqs:SendMessage'], [g.parkedRecordsQueueArn]));
  switch (g.source.kind) {
    case 'kafka-msk':
      out.push(allow('KafkaCluster', ['kafka-cluster:Connect', 'kafka-cluster:DescribeClusterDynamicConfiguration'], [p.clusterArn]));
      out.push(allow('KafkaTopic', ['kafka-cluster:DescribeTopic', 'kafka-cluster:ReadData'], [kafkaArn(scope, p.clusterArn, 'topic', p.topic)]));
      out.push(allow('KafkaGroup', ['kafka-cluster:AlterGroup', 'kafka-cluster:DescribeGroup'], [kafkaArn(scope, p.clusterArn, 'group', p.consumerGroupId)]));
      break;
    case 'kafka-self-managed':
      out.push(allow('KafkaSecrets', ['secretsmanager:GetSecretValue'],
        p.rootCaSecretArn ? [p.secretArn, p.rootCaSecretArn] : [p.secretArn]));
      out.push(allow('KafkaVpc', ['ec2:CreateNetworkInterface', 'ec2:DescribeNetworkInterfaces', 'ec2:DescribeVpcs',
        'ec2:DeleteNetworkInterface', 'ec2:DescribeSubnets', 'ec2:DescribeSecurityGroups'], ['*']));
      break;
    case 'sqs':
      out.push(allow('SqsQueue', ['sqs:ReceiveMessage', 'sqs:DeleteMessage', 'sqs:GetQueueAttributes', 'sqs:ChangeMessageVisibility'], [p.queueArn]));
      break;
    case 'kinesis':
      out.push(allow('KinesisStream', ['kinesis:DescribeStream', 'kinesis:DescribeStreamSummary', 'kinesis:GetRecords',
        'kinesis:GetShardIterator', 'kinesis:ListShards'], [p.streamArn]));
      break;
    case 'dynamodb-streams':
      out.push(allow('DynamoDbStream', ['dynamodb:DescribeStream', 'dynamodb:GetRecords', 'dynamodb:GetShardIterator',
        'dynamodb:ListStreams'], [p.streamArn]));
      break;
    case 'rabbitmq':
    case 'activemq': {
      out.push(allow('MqBroker', ['mq:DescribeBroker'], [p.brokerArn]));
      out.push(allow('MqSecret', ['secretsmanager:GetSecretValue'], [p.secretArn]));
      const region = Fn.select(3, Fn.split(':', p.brokerArn));
      const account = Fn.select(4, Fn.split(':', p.brokerArn));
      out.push(allow('MqNetworkInterfaces', ['ec2:CreateNetworkInterface', 'ec2:DeleteNetworkInterface'],
        [`arn:${s.partition}:ec2:${region}:${account}:*`]));
      out.push(allow('MqVpc', ['ec2:DescribeNetworkInterfaces', 'ec2:DescribeSecurityGroups', 'ec2:DescribeSubnets',
        'ec2:DescribeVpcs'], ['*']));
      break;
    }
  }
  const reg = p.schemaRegistry;
  if (reg) {
    if (reg.uri.startsWith('arn:')) {
      out.push(allow('GlueSchemaRegistry', ['glue:GetRegistry'], [reg.uri]));
      out.push(allow('GlueSchemaVersions', ['glue:GetSchemaVersion'], [reg.uri, reg.uri.replace('registry/', 'schema/') + '/*']));
    }
    if (reg.auth && reg.auth !== 'NONE' && reg.secretArn) {
      out.push(allow('SchemaRegistrySecret', ['secretsmanager:GetSecretValue'], [reg.secretArn]));
    }
    if (reg.rootCaSecretArn) out.push(allow('SchemaRegistryRootCa', ['secretsmanager:GetSecretValue'], [reg.rootCaSecretArn]));
  }
  return out;
}
