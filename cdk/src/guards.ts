// The settings whose combination breaks the guarantees or quietly costs
// redeliveries, refused at synth: each an Error naming the setting and the
// fix, each limit as AWS documents it (docs/configuration.md, "Settings that
// work together", lists them with who checks each).
import { Duration } from 'aws-cdk-lib';
import { Source } from './source';

/** What the checks read, resolved by the construct. */
export interface Combination {
  readonly source: Source;
  /** The function's timeout, in seconds (the CDK's default: 3). */
  readonly timeoutSeconds: number;
  readonly lockTimeout: Duration;
  readonly safetyMarginMs: number;
  readonly maxBatchingWindow: Duration;
  /** The mapping's retry settings as given (undefined: not set). */
  readonly retryAttempts?: number;
  readonly maxRecordAge?: Duration;
  readonly onFailureGiven: boolean;
  /** An SQS source's visibility timeout, when the app gives it. */
  readonly sqsVisibilityTimeout?: Duration;
}

/** Lambda's limit on a Kafka or Amazon MQ mapping's function timeout (14 minutes). */
const BROKER_TIMEOUT_LIMIT_SECONDS = 14 * 60;
/** The longest batching window a mapping takes (5 minutes). */
const WINDOW_LIMIT_SECONDS = 300;

/** Throws on the first combination that cannot work. */
export function refuseBrokenCombinations(c: Combination): void {
  const source = c.source.eventSource;
  // Retries, record age and destinations are the Kafka, Kinesis and
  // DynamoDB Streams mappings' own; SQS and Amazon MQ bound retries by the
  // queue's redrive policy or the broker's redelivery limit.
  if (!c.source.hasOnFailureDestination) {
    const given = [
      ['retryAttempts', c.retryAttempts !== undefined],
      ['maxRecordAge', c.maxRecordAge !== undefined],
      ['onFailure', c.onFailureGiven],
    ].filter(([, set]) => set).map(([name]) => name);
    if (given.length) {
      throw new Error(`${given.join(', ')}: not a setting of a ${source} mapping (Lambda takes them for Kafka, Kinesis and DynamoDB Streams): `
        + (source === 'sqs' ? 'bound retries with the queue\'s redrive policy (maxReceiveCount) and its dead-letter queue'
          : 'bound retries with the broker\'s redelivery limit and its dead-letter queue'));
    }
  }
  // A Kafka or Amazon MQ mapping invokes a function for at most 14 minutes.
  if ((source === 'kafka' || c.source.isMq) && c.timeoutSeconds > BROKER_TIMEOUT_LIMIT_SECONDS) {
    throw new Error(`the function's timeout (${c.timeoutSeconds} s) is over the ${BROKER_TIMEOUT_LIMIT_SECONDS} s a ${source} mapping allows: `
      + 'give the RustFunction timeout: Duration.minutes(14) or less');
  }
  // The margin is taken off every invocation: one at least as long as the
  // timeout starts no record at all.
  if (c.safetyMarginMs >= c.timeoutSeconds * 1000) {
    throw new Error(`safetyMarginMs (${c.safetyMarginMs}) leaves nothing of the function's ${c.timeoutSeconds} s timeout: `
      + 'no record would ever start; give safetyMarginMs under the timeout (5000 with the SAM template\'s 120 s)');
  }
  // A lease is renewed every third of it: under a second, renewals race the
  // store's own latency and a live owner loses its lock.
  if (c.lockTimeout.toMilliseconds() < 1000) {
    throw new Error(`lockTimeout (${c.lockTimeout.toMilliseconds()} ms) is renewed every third of it, within a store's latency: give it Duration.seconds(1) or more (30 by default)`);
  }
  if (c.maxBatchingWindow.toSeconds() > WINDOW_LIMIT_SECONDS) {
    throw new Error(`maxBatchingWindow (${c.maxBatchingWindow.toSeconds()} s) is over the ${WINDOW_LIMIT_SECONDS} s Lambda takes: give Duration.minutes(5) or less`);
  }
  // SQS hands a message still being processed to another invocation when its
  // visibility timeout ends first: AWS asks for at least six times the
  // function's timeout plus the batching window.
  const visibility = c.sqsVisibilityTimeout?.toSeconds();
  const needed = 6 * c.timeoutSeconds + c.maxBatchingWindow.toSeconds();
  if (visibility !== undefined && visibility < needed) {
    throw new Error(`the queue's visibility timeout (${visibility} s) is under 6 x the function's timeout + the batching window `
      + `(${needed} s): SQS would hand messages still in flight to another invocation; raise the queue's VisibilityTimeout`);
  }
}
