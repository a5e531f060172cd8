// The event source mapping's properties, as the SAM template's
// FunctionKafka, SelfManagedEventSourceMapping, SqsEventSourceMapping,
// KinesisEventSourceMapping, DynamoDbStreamsEventSourceMapping,
// RabbitMqEventSourceMapping and ActiveMqEventSourceMapping.
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { Token } from 'aws-cdk-lib';
import { Source } from './source';

/** The settings the construct's props give every mapping. */
export interface MappingSettings {
  readonly functionName: string;
  readonly batchSize: number;
  readonly maxBatchingWindowSeconds: number;
  readonly retryAttempts: number;
  readonly maxRecordAgeSeconds: number;
  readonly filterPattern?: string;
  /** The on-failure destination's ARN (or kafka://TOPIC), when the source has one. */
  readonly onFailureDestination?: string;
}

function schemaRegistryConfig(reg: any): lambda.CfnEventSourceMapping.SchemaRegistryConfigProperty | undefined {
  if (!reg) return undefined;
  const attributes: string = reg.validationAttributes ?? 'VALUE';
  const access = [
    ...(reg.auth && reg.auth !== 'NONE' && reg.secretArn ? [{ type: reg.auth, uri: reg.secretArn }] : []),
    ...(reg.rootCaSecretArn ? [{ type: 'SERVER_ROOT_CA_CERTIFICATE', uri: reg.rootCaSecretArn }] : []),
  ];
  return {
    schemaRegistryUri: reg.uri,
    eventRecordFormat: reg.eventRecordFormat ?? 'JSON',
    schemaValidationConfigs: [
      ...(attributes !== 'VALUE' ? [{ attribute: 'KEY' }] : []),
      ...(attributes !== 'KEY' ? [{ attribute: 'VALUE' }] : []),
    ],
    accessConfigs: access.length ? access : undefined,
  };
}

/** A literal .fifo queue ARN, or what the props say. */
export function sqsIsFifo(p: any): boolean {
  return p.fifo ?? (!Token.isUnresolved(p.queueArn) && p.queueArn.endsWith('.fifo'));
}

export function mappingProps(source: Source, m: MappingSettings): lambda.CfnEventSourceMappingProps {
  const p = source.props;
  const filterCriteria = m.filterPattern ? { filters: [{ pattern: m.filterPattern }] } : undefined;
  const common = {
    functionName: m.functionName,
    batchSize: m.batchSize,
    maximumBatchingWindowInSeconds: m.maxBatchingWindowSeconds,
    filterCriteria,
  };
  // Kafka, Kinesis, DynamoDB Streams: partial batch responses, bounded
  // retries, bisection, the on-failure destination.
  const retried = {
    functionResponseTypes: ['ReportBatchItemFailures'],
    maximumRetryAttempts: m.retryAttempts,
    maximumRecordAgeInSeconds: m.maxRecordAgeSeconds,
    bisectBatchOnFunctionError: true,
    destinationConfig: { onFailure: { destination: m.onFailureDestination } },
  };
  const startingPosition = p.startingPosition ?? 'TRIM_HORIZON';
  const startingPositionTimestamp = startingPosition === 'AT_TIMESTAMP' ? p.startingPositionTimestamp : undefined;
  const kafka = () => ({
    ...common,
    ...retried,
    topics: [p.topic],
    startingPosition,
    startingPositionTimestamp,
    provisionedPollerConfig: {
      minimumPollers: p.minimumPollers ?? 1,
      maximumPollers: p.maximumPollers ?? 3,
      pollerGroupName: p.pollerGroupName || undefined,
    },
  });
  const kafkaConfig = () => ({ consumerGroupId: p.consumerGroupId, schemaRegistryConfig: schemaRegistryConfig(p.schemaRegistry) });
  switch (source.kind) {
    case 'kafka-msk':
      return { ...kafka(), eventSourceArn: p.clusterArn, amazonManagedKafkaEventSourceConfig: kafkaConfig() };
    case 'kafka-self-managed':
      return {
        ...kafka(),
        selfManagedEventSource: { endpoints: { kafkaBootstrapServers: p.bootstrapServers } },
        selfManagedKafkaEventSourceConfig: kafkaConfig(),
        sourceAccessConfigurations: [
          { type: p.auth ?? 'SASL_SCRAM_512_AUTH', uri: p.secretArn },
          ...(p.rootCaSecretArn ? [{ type: 'SERVER_ROOT_CA_CERTIFICATE', uri: p.rootCaSecretArn }] : []),
          ...(p.subnetIds as string[]).slice(0, 6).map((id) => ({ type: 'VPC_SUBNET', uri: `subnet:${id}` })),
          ...(p.securityGroupIds as string[]).slice(0, 5).map((id) => ({ type: 'VPC_SECURITY_GROUP', uri: `security_group:${id}` })),
        ],
      };
    case 'sqs': {
      // A FIFO queue: batches of at most 10, no batching window.
      const fifo = sqsIsFifo(p);
      return {
        ...common,
        eventSourceArn: p.queueArn,
        batchSize: fifo ? Math.min(m.batchSize, 10) : m.batchSize,
        maximumBatchingWindowInSeconds: fifo ? undefined : m.maxBatchingWindowSeconds,
        functionResponseTypes: ['ReportBatchItemFailures'],
        scalingConfig: p.maximumConcurrency ? { maximumConcurrency: p.maximumConcurrency } : undefined,
      };
    }
    case 'kinesis':
      return {
        ...common,
        ...retried,
        eventSourceArn: p.streamArn,
        startingPosition,
        startingPositionTimestamp,
        parallelizationFactor: p.parallelizationFactor ?? 1,
      };
    case 'dynamodb-streams':
      return {
        ...common,
        ...retried,
        eventSourceArn: p.streamArn,
        startingPosition,
        parallelizationFactor: p.parallelizationFactor ?? 1,
      };
    case 'rabbitmq':
    case 'activemq':
      // No partial batch response, retries, bisection or destination: the
      // broker redelivers a failed batch whole.
      return {
        ...common,
        eventSourceArn: p.brokerArn,
        queues: [p.queue],
        sourceAccessConfigurations: [
          { type: 'BASIC_AUTH', uri: p.secretArn },
          ...(source.kind === 'rabbitmq' && p.virtualHost ? [{ type: 'VIRTUAL_HOST', uri: p.virtualHost }] : []),
        ],
      };
    default:
      throw new Error(`unknown source ${source.kind}`);
  }
}
