// A team's own resources around its function: the tables its handler writes
// its effects to and the destinations it emits to, each by the variable the
// handler reads its name from. The construct grants what each needs, and
// nothing else: the SAM pieces' HandlerTables and HandlerDestinations
// actions, action for action.
import { Stack } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as events from 'aws-cdk-lib/aws-events';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kinesis from 'aws-cdk-lib/aws-kinesis';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { kafkaArn } from './iam';

/**
 * What a handler's own table is granted (the SAM pieces' `HandlerTables`):
 * its reads, and the writes an effect makes, in the completion's
 * `TransactWriteItems` or on its own; no scan, no stream.
 */
export const HANDLER_TABLE_ACTIONS = [
  'dynamodb:GetItem', 'dynamodb:BatchGetItem', 'dynamodb:Query', 'dynamodb:ConditionCheckItem',
  'dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem', 'dynamodb:BatchWriteItem',
];

/** Grants `fn` a handler's own `table`: [`HANDLER_TABLE_ACTIONS`], and its KMS key's use if it has one. */
export function grantHandlerTable(table: dynamodb.ITable, fn: lambda.IFunction): void {
  table.grant(fn, ...HANDLER_TABLE_ACTIONS);
  table.encryptionKey?.grantEncryptDecrypt(fn);
}

/** A topic of an MSK cluster the handler emits to, over IAM authentication. */
export interface MskTopicDestinationProps {
  /** The cluster's ARN. */
  readonly clusterArn: string;
  /** The topic, created beforehand. */
  readonly topic: string;
  /** The cluster's IAM brokers, host:port (port 9098). */
  readonly bootstrapServers: string[];
}

/**
 * Where a handler emits messages (`Completion::emit`): the variable it reads
 * holds the destination's name as the crate tells its kind (a queue's URL, a
 * topic's, bus's or stream's ARN, `kafka://brokers/topic?auth=iam`). Each
 * kind is sent by a cargo feature of the `exactly-once` crate, named by
 * `feature`: the function's build must have it.
 */
export class Destination {
  /** An SQS queue (feature `sqs`): sqs:SendMessage, and its key's use if encrypted with KMS. */
  public static queue(queue: sqs.IQueue): Destination {
    return new Destination('sqs', queue.queueUrl, (fn) => {
      queue.grant(fn, 'sqs:SendMessage');
      queue.encryptionMasterKey?.grantEncryptDecrypt(fn);
    });
  }
  /** An SNS topic (feature `sns`): sns:Publish, and its key's use if encrypted with KMS. */
  public static topic(topic: sns.ITopic): Destination {
    return new Destination('sns', topic.topicArn, (fn) => topic.grantPublish(fn));
  }
  /** An EventBridge event bus (feature `eventbridge`): events:PutEvents. */
  public static eventBus(bus: events.IEventBus): Destination {
    return new Destination('eventbridge', bus.eventBusArn, (fn) => bus.grantPutEventsTo(fn));
  }
  /** A Kinesis data stream (feature `kinesis`): kinesis:PutRecords, and its key's use if encrypted with KMS. */
  public static stream(stream: kinesis.IStream): Destination {
    return new Destination('kinesis', stream.streamArn, (fn) => {
      stream.grant(fn, 'kinesis:PutRecords');
      stream.encryptionKey?.grantEncrypt(fn);
    });
  }
  /** A topic of an MSK cluster (feature `kafka`): connect, describe the topic, write to it. */
  public static mskTopic(props: MskTopicDestinationProps): Destination {
    if (!props.bootstrapServers.length) throw new Error('Destination.mskTopic needs the cluster\'s bootstrapServers');
    return new Destination('kafka', `kafka://${props.bootstrapServers.join(',')}/${props.topic}?auth=iam`, (fn) => {
      fn.addToRolePolicy(new iam.PolicyStatement({
        actions: ['kafka-cluster:Connect', 'kafka-cluster:DescribeTopic', 'kafka-cluster:WriteData'],
        resources: [props.clusterArn, kafkaArn(Stack.of(fn), props.clusterArn, 'topic', props.topic)],
      }));
    });
  }

  private constructor(
    /** The cargo feature of `exactly-once` that sends to it. */
    public readonly feature: string,
    /** The destination's name, the value of the handler's variable. */
    public readonly name: string,
    /** Grants the function what sending needs. */
    public readonly grantSend: (fn: lambda.IFunction) => void,
  ) {}
}
