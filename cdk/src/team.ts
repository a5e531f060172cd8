// A team's own resources around its function: the tables its handler writes
// its effects to and the destinations it emits to, each by the variable the
// handler reads its name from. The construct grants what each needs, and
// nothing else.
import { Stack } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kinesis from 'aws-cdk-lib/aws-kinesis';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { kafkaArn } from './iam';

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
    return new Destination('sqs', queue.queueUrl, (fn) => queue.grantSendMessages(fn));
  }
  /** An SNS topic (feature `sns`): sns:Publish. */
  public static topic(topic: sns.ITopic): Destination {
    return new Destination('sns', topic.topicArn, (fn) => topic.grantPublish(fn));
  }
  /** An EventBridge event bus (feature `eventbridge`): events:PutEvents. */
  public static eventBus(bus: events.IEventBus): Destination {
    return new Destination('eventbridge', bus.eventBusArn, (fn) => bus.grantPutEventsTo(fn));
  }
  /** A Kinesis data stream (feature `kinesis`): its write actions. */
  public static stream(stream: kinesis.IStream): Destination {
    return new Destination('kinesis', stream.streamArn, (fn) => stream.grantWrite(fn));
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
