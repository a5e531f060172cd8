// The event source: one per construct, as the SAM template's EventSource
// (and KafkaSource) parameters. Plain data here; mapping.ts and iam.ts turn
// it into the event source mapping and the role's statements.
import { Duration } from 'aws-cdk-lib';

/** Where a new consumer group or mapping starts reading (StartingPosition). */
export enum StartingPosition {
  TRIM_HORIZON = 'TRIM_HORIZON',
  LATEST = 'LATEST',
  AT_TIMESTAMP = 'AT_TIMESTAMP',
}

/** How the mapping authenticates to self-managed brokers (KafkaAuth). */
export enum KafkaAuth {
  SASL_SCRAM_512_AUTH = 'SASL_SCRAM_512_AUTH',
  SASL_SCRAM_256_AUTH = 'SASL_SCRAM_256_AUTH',
  CLIENT_CERTIFICATE_TLS_AUTH = 'CLIENT_CERTIFICATE_TLS_AUTH',
  BASIC_AUTH = 'BASIC_AUTH',
}

/** A schema registry the Kafka mapping validates records against (SchemaRegistry* parameters). */
export interface KafkaSchemaRegistry {
  /** A Glue registry ARN or a Confluent registry URL (SchemaRegistryUri). */
  readonly uri: string;
  /** JSON or SOURCE (EventRecordFormat). @default 'JSON' */
  readonly eventRecordFormat?: string;
  /** VALUE, KEY or KEY,VALUE (SchemaValidationAttributes). @default 'VALUE' */
  readonly validationAttributes?: string;
  /** BASIC_AUTH or CLIENT_CERTIFICATE_TLS_AUTH, with secretArn (SchemaRegistryAuth). @default none */
  readonly auth?: string;
  /** The registry's credentials (SchemaRegistrySecretArn). */
  readonly secretArn?: string;
  /** The registry's private root CA (SchemaRegistryRootCaSecretArn). */
  readonly rootCaSecretArn?: string;
}

/** What both Kafka sources share. */
export interface KafkaSourceCommonProps {
  /** The topic the function consumes (TopicName). */
  readonly topic: string;
  /** The mapping's consumer group (ConsumerGroupId). */
  readonly consumerGroupId: string;
  /** @default StartingPosition.TRIM_HORIZON */
  readonly startingPosition?: StartingPosition;
  /** Unix seconds, with AT_TIMESTAMP (StartingPositionTimestamp). */
  readonly startingPositionTimestamp?: number;
  /** Provisioned mode (MinimumPollers). @default 1 */
  readonly minimumPollers?: number;
  /** Provisioned mode (MaximumPollers). @default 3 */
  readonly maximumPollers?: number;
  /** A shared poller group (PollerGroupName). @default the mapping's own pollers */
  readonly pollerGroupName?: string;
  /** @default no schema registry */
  readonly schemaRegistry?: KafkaSchemaRegistry;
}

/** Amazon MSK with IAM authentication (KafkaSource msk). */
export interface MskSourceProps extends KafkaSourceCommonProps {
  /** arn:aws:kafka:REGION:ACCOUNT:cluster/NAME/UUID (ClusterArn). */
  readonly clusterArn: string;
}

/** Any other Kafka cluster, reached from a VPC (KafkaSource self-managed). */
export interface SelfManagedKafkaSourceProps extends KafkaSourceCommonProps {
  /** host:port of the brokers, at most 10 (BootstrapServers). */
  readonly bootstrapServers: string[];
  /** The credentials or client certificate (KafkaSecretArn). */
  readonly secretArn: string;
  /** @default KafkaAuth.SASL_SCRAM_512_AUTH */
  readonly auth?: KafkaAuth;
  /** The brokers' private root CA (KafkaRootCaSecretArn). @default a public CA */
  readonly rootCaSecretArn?: string;
  /** Subnets the mapping reaches the brokers from, at most 6 (SubnetIds). */
  readonly subnetIds: string[];
  /** Security groups of the mapping, at most 5 (SecurityGroupIds). */
  readonly securityGroupIds: string[];
}

/** An existing SQS queue, standard or FIFO (EventSource sqs). */
export interface SqsSourceProps {
  /** arn:aws:sqs:REGION:ACCOUNT:NAME[.fifo] (SqsQueueArn). */
  readonly queueArn: string;
  /** @default true when queueArn is a literal ending in .fifo */
  readonly fifo?: boolean;
  /** 2 to 1000 (SqsMaximumConcurrency). @default no cap */
  readonly maximumConcurrency?: number;
  /**
   * The queue's visibility timeout, when you know it (the queue is not this
   * stack's): checked at synth against AWS's rule, at least six times the
   * function's timeout plus the batching window. @default not checked
   */
  readonly visibilityTimeout?: Duration;
}

/** An existing Kinesis data stream (EventSource kinesis). */
export interface KinesisSourceProps {
  /** (KinesisStreamArn) */
  readonly streamArn: string;
  /** 1 to 10 (ParallelizationFactor). @default 1 */
  readonly parallelizationFactor?: number;
  /** @default StartingPosition.TRIM_HORIZON */
  readonly startingPosition?: StartingPosition;
  /** Unix seconds, with AT_TIMESTAMP. */
  readonly startingPositionTimestamp?: number;
}

/** An existing table's stream (EventSource dynamodb-streams). */
export interface DynamoDbStreamsSourceProps {
  /** The table's LatestStreamArn (DynamoDbStreamArn). */
  readonly streamArn: string;
  /** 1 to 10 (ParallelizationFactor). @default 1 */
  readonly parallelizationFactor?: number;
  /** TRIM_HORIZON or LATEST. @default StartingPosition.TRIM_HORIZON */
  readonly startingPosition?: StartingPosition;
}

/** A queue of an existing Amazon MQ broker (EventSource rabbitmq or activemq). */
export interface ActiveMqSourceProps {
  /** arn:aws:mq:REGION:ACCOUNT:broker:NAME:ID (MqBrokerArn). */
  readonly brokerArn: string;
  /** The queue the mapping consumes (MqQueueName). */
  readonly queue: string;
  /** The broker user's {"username", "password"} secret (MqSecretArn). */
  readonly secretArn: string;
}

/** A RabbitMQ queue, optionally of a virtual host. */
export interface RabbitMqSourceProps extends ActiveMqSourceProps {
  /** (MqVirtualHost) @default the broker's default, / */
  readonly virtualHost?: string;
}

/** The one event source of an ExactlyOnce construct. */
export class Source {
  /** Amazon MSK, IAM authentication. */
  public static msk(props: MskSourceProps): Source {
    return new Source('kafka-msk', 'kafka', props);
  }
  /** A self-managed Kafka cluster. */
  public static selfManagedKafka(props: SelfManagedKafkaSourceProps): Source {
    return new Source('kafka-self-managed', 'kafka', props);
  }
  /** An SQS queue (standard or FIFO). */
  public static sqs(props: SqsSourceProps): Source {
    return new Source('sqs', 'sqs', props);
  }
  /** A Kinesis data stream. */
  public static kinesis(props: KinesisSourceProps): Source {
    return new Source('kinesis', 'kinesis', props);
  }
  /** A DynamoDB table's stream. */
  public static dynamoDbStreams(props: DynamoDbStreamsSourceProps): Source {
    return new Source('dynamodb-streams', 'dynamodb-streams', props);
  }
  /** A RabbitMQ queue on Amazon MQ. */
  public static rabbitMq(props: RabbitMqSourceProps): Source {
    return new Source('rabbitmq', 'rabbitmq', props);
  }
  /** An ActiveMQ queue on Amazon MQ. */
  public static activeMq(props: ActiveMqSourceProps): Source {
    return new Source('activemq', 'activemq', props);
  }

  /**
   * @param kind kafka-msk, kafka-self-managed, sqs, kinesis, dynamodb-streams, rabbitmq or activemq
   * @param eventSource the function's EVENT_SOURCES (the SAM template's EventSource)
   * @param props the factory's props
   */
  private constructor(
    public readonly kind: string,
    public readonly eventSource: string,
    public readonly props: any,
  ) {}

  /** Kafka, Kinesis and DynamoDB Streams mappings have an on-failure destination; SQS and Amazon MQ none. */
  public get hasOnFailureDestination(): boolean {
    return ['kafka', 'kinesis', 'dynamodb-streams'].includes(this.eventSource);
  }
  /** RabbitMQ or ActiveMQ. */
  public get isMq(): boolean {
    return this.eventSource === 'rabbitmq' || this.eventSource === 'activemq';
  }
}
