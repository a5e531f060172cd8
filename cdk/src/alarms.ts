// The SAM template's alarms (all to the alarm topic, notBreaching) and its
// operations dashboard.
import { Duration, Fn, Stack } from 'aws-cdk-lib';
import * as cw from 'aws-cdk-lib/aws-cloudwatch';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as sns from 'aws-cdk-lib/aws-sns';
import { Construct } from 'constructs';
import { Source } from './source';

/** Alarm thresholds (the SAM template's alarm parameters). */
export interface AlarmThresholds {
  readonly offsetLag: number;
  readonly iteratorAgeMs: number;
  readonly oldestMessageAgeSeconds: number;
  readonly mqQueueDepth: number;
  readonly takenOver: number;
  readonly lockLost: number;
  readonly storeErrors: number;
  readonly storeLatencyP99Ms: number;
  readonly stuckKeyAgeSeconds: number;
  readonly unsentAgeSeconds: number;
}

export interface AlarmContext {
  readonly topic: sns.ITopic;
  readonly functionName: string;
  readonly source: Source;
  readonly deadLetterQueueName?: string;
  readonly stuckKeyCheck: boolean;
  readonly thresholds: AlarmThresholds;
}

const NS = 'MskExactlyOnce';

/** The source's lag metrics: [metric or math expression, dashboard title, dashboard rows]. */
function lag(c: AlarmContext): { metric?: cw.IMetric; title: string; rows: any[] } {
  const fn = { FunctionName: c.functionName };
  const p = c.source.props;
  const max1 = { statistic: 'Maximum', period: Duration.minutes(1) };
  switch (c.source.eventSource) {
    case 'kafka':
      return { metric: new cw.Metric({ namespace: 'AWS/Lambda', metricName: 'OffsetLag', dimensionsMap: fn, ...max1 }),
        title: 'Offset lag', rows: [['AWS/Lambda', 'OffsetLag', 'FunctionName', c.functionName]] };
    case 'sqs': {
      const queueName = Fn.select(5, Fn.split(':', p.queueArn));
      return { metric: new cw.Metric({ namespace: 'AWS/SQS', metricName: 'ApproximateAgeOfOldestMessage', dimensionsMap: { QueueName: queueName }, ...max1 }),
        title: 'Oldest message age (s)', rows: [['AWS/SQS', 'ApproximateAgeOfOldestMessage', 'QueueName', queueName]] };
    }
    case 'rabbitmq': {
      const broker = Fn.select(6, Fn.split(':', p.brokerArn));
      const dims = { Broker: broker, VirtualHost: p.virtualHost || '/', Queue: p.queue };
      return { metric: new cw.Metric({ namespace: 'AWS/AmazonMQ', metricName: 'MessageReadyCount', dimensionsMap: dims, ...max1 }),
        title: 'Queue depth (messages)', rows: [['AWS/AmazonMQ', 'MessageReadyCount', 'Broker', broker, 'VirtualHost', dims.VirtualHost, 'Queue', p.queue]] };
    }
    case 'activemq': {
      // An instance is the broker's name with -1 or -2: the larger, whichever is active.
      const broker = Fn.select(6, Fn.split(':', p.brokerArn));
      const size = (n: number) => new cw.Metric({ namespace: 'AWS/AmazonMQ', metricName: 'QueueSize',
        dimensionsMap: { Broker: `${broker}-${n}`, Queue: p.queue }, ...max1 });
      return { metric: new cw.MathExpression({ expression: 'MAX([first, second])', label: 'QueueSize of the active instance',
        usingMetrics: { first: size(1), second: size(2) }, period: Duration.minutes(1) }),
      title: 'Queue depth (messages)', rows: [1, 2].map((n) => ['AWS/AmazonMQ', 'QueueSize', 'Broker', `${broker}-${n}`, 'Queue', p.queue]) };
    }
    default:
      return { metric: new cw.Metric({ namespace: 'AWS/Lambda', metricName: 'IteratorAge', dimensionsMap: fn, ...max1 }),
        title: 'Iterator age (ms)', rows: [['AWS/Lambda', 'IteratorAge', 'FunctionName', c.functionName]] };
  }
}

export function createAlarms(scope: Construct, c: AlarmContext): cw.Alarm[] {
  const t = c.thresholds;
  const fn = { FunctionName: c.functionName };
  const alarms: cw.Alarm[] = [];
  const add = (id: string, description: string, metric: cw.IMetric, threshold: number, periods = 1) => {
    const alarm = new cw.Alarm(scope, id, {
      alarmDescription: description,
      metric,
      threshold,
      evaluationPeriods: periods,
      datapointsToAlarm: periods > 1 ? periods : undefined,
      comparisonOperator: cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
      treatMissingData: cw.TreatMissingData.NOT_BREACHING,
    });
    alarm.addAlarmAction(new actions.SnsAction(c.topic));
    alarm.addOkAction(new actions.SnsAction(c.topic));
    alarms.push(alarm);
  };
  const own = (name: string, statistic = 'Sum', minutes = 5) =>
    new cw.Metric({ namespace: NS, metricName: name, dimensionsMap: fn, statistic, period: Duration.minutes(minutes) });
  const lambdaSum = (name: string) =>
    new cw.Metric({ namespace: 'AWS/Lambda', metricName: name, dimensionsMap: fn, statistic: 'Sum', period: Duration.minutes(5) });

  if (c.deadLetterQueueName) {
    add('DeadLetterQueueAlarm', 'Records reached the dead-letter queue (they failed every retry).',
      new cw.Metric({ namespace: 'AWS/SQS', metricName: 'ApproximateNumberOfMessagesVisible',
        dimensionsMap: { QueueName: c.deadLetterQueueName }, statistic: 'Maximum', period: Duration.minutes(5) }), 0);
  }
  add('ParkedRecordsAlarm', 'Records failed permanently and were parked (their keys are FAILED; the records are in the parked-records queue).', own('Parked'), 0);
  add('FunctionErrorsAlarm', 'The function failed invocations (whole batches retried) in the last 5 minutes.', lambdaSum('Errors'), 0);
  add('FunctionThrottlesAlarm', 'The function was throttled in the last 5 minutes (the partitions fall behind).', lambdaSum('Throttles'), 0);
  const l = lag(c);
  switch (c.source.eventSource) {
    case 'kafka':
      add('OffsetLagAlarm', 'The Kafka event source mapping has fallen behind the topic for 5 minutes.', l.metric!, t.offsetLag, 5);
      break;
    case 'kinesis':
    case 'dynamodb-streams':
      add('IteratorAgeAlarm', 'The event source mapping has fallen behind the stream for 5 minutes.', l.metric!, t.iteratorAgeMs, 5);
      break;
    case 'sqs':
      add('OldestMessageAlarm', "The source queue's oldest message has waited longer than OldestMessageAgeAlarmSeconds for 5 minutes.", l.metric!, t.oldestMessageAgeSeconds, 5);
      break;
    default:
      add('MqQueueDepthAlarm', 'The Amazon MQ source queue has held more than MqQueueDepthAlarmThreshold messages for 5 minutes.', l.metric!, t.mqQueueDepth, 5);
  }
  add('TakenOverAlarm', 'Many keys were taken over from abandoned claims in the last 5 minutes (workers crash or stall past their lease).', own('TakenOver'), t.takenOver);
  add('LockLostAlarm', 'Many workers lost their lock in the last 5 minutes (leases too short for the work, or the idempotency store slow).', own('LockLost'), t.lockLost);
  add('StoreErrorsAlarm', 'Records failed on idempotency store errors in the last 5 minutes (reported and retried).', own('StoreError'), t.storeErrors);
  add('FailedClosedAlarm', 'The idempotency store was unreachable and the function failed closed in the last 5 minutes (records retried, nothing progresses).', own('FailedClosed'), 0);
  add('UnrecordedEffectsAlarm', "A record's effect happened but its completion could not be recorded; its redelivery may repeat the effect. Investigate at once.", own('UnrecordedEffects', 'Sum', 1), 0);
  add('ClockSkewAlarm', "A container's clock is off the idempotency store's by more than the 400 ms the guarantees assume; a lease may be taken over while still held. Check the hosts' time sync (docs/operations.md).", own('ClockSkewMs', 'Maximum'), 400);
  add('ScopeConflictAlarm', 'Records were refused because another function holds their keys in the same idempotency table under the same key prefix; their partitions stop until IdempotencyKeyPrefix (or, to share keys on purpose, IdempotencyScope) is set.', own('ScopeConflict', 'Sum', 1), 0);
  add('StoreLatencyAlarm', "The idempotency store's p99 round trip stayed above StoreLatencyP99AlarmMs for 3 minutes.", own('StoreLatency', 'p99', 1), t.storeLatencyP99Ms, 3);
  if (c.stuckKeyCheck) {
    add('StuckKeysAlarm', 'A STARTED key is older than StuckKeyAgeAlarmSeconds (an abandoned claim nobody retries; see exactly-once-ops stuck).', own('OldestStartedAgeSeconds', 'Maximum'), t.stuckKeyAgeSeconds);
    add('UnsentMessagesAlarm', 'A message a record emitted is still unsent UnsentAgeAlarmSeconds after its record completed (see exactly-once-ops unsent).', own('OldestUnsentAgeSeconds', 'Maximum'), t.unsentAgeSeconds);
  }
  return alarms;
}

/** The dashboard's body, widget for widget the SAM template's. */
export function dashboardBody(scope: Construct, c: AlarmContext): string {
  const region = Stack.of(scope).region;
  const f = c.functionName;
  const m = (name: string, extra?: any) => ['MskExactlyOnce', name, 'FunctionName', f, ...(extra ? [extra] : [])];
  const widget = (x: number, y: number, properties: any) =>
    ({ type: 'metric', x, y, width: 12, height: 6, properties: { ...properties, region, period: 60 } });
  const l = lag(c);
  const widgets = [
    widget(0, 0, { title: 'Outcomes per minute', view: 'timeSeries', stacked: true, stat: 'Sum',
      metrics: ['Processed', 'Duplicate', 'Rejected', 'Failed', 'PreviouslyFailed', 'InProgress', 'TimedOut', 'Retrying'].map((n) => m(n)) }),
    widget(12, 0, { title: 'Store latency (ms)', view: 'timeSeries', stacked: false,
      metrics: [m('StoreLatency', { stat: 'p50', label: 'p50' }), m('StoreLatency', { stat: 'p99', label: 'p99' })],
      annotations: { horizontal: [{ label: 'StoreLatencyAlarm', value: c.thresholds.storeLatencyP99Ms }] } }),
    widget(0, 6, { title: 'Store round trips per record', view: 'timeSeries', stacked: false, stat: 'Sum',
      metrics: [[{ expression: 'm1/m2', label: 'store requests per record', id: 'e1' }],
        m('StoreRequests', { id: 'm1', visible: false }), m('Records', { id: 'm2', visible: false })] }),
    widget(12, 6, { title: 'Takeovers and lost locks', view: 'timeSeries', stacked: false, stat: 'Sum',
      metrics: [m('TakenOver'), m('LockLost')] }),
    widget(0, 12, { title: 'Failing closed and unrecorded effects', view: 'timeSeries', stacked: false, stat: 'Sum',
      metrics: [m('FailedClosed'), m('UnrecordedEffects'), m('StoreError')] }),
    widget(12, 12, { title: 'Stuck keys', view: 'timeSeries', stacked: false, stat: 'Maximum',
      metrics: [m('OldestStartedAgeSeconds', { label: 'oldest STARTED key (s)' }), m('StuckKeys', { label: 'stuck keys', yAxis: 'right' })],
      annotations: { horizontal: [{ label: 'StuckKeysAlarm', value: c.thresholds.stuckKeyAgeSeconds }] } }),
    widget(0, 18, { title: l.title, view: 'timeSeries', stacked: false, stat: 'Maximum', metrics: l.rows }),
    widget(12, 18, { title: 'Errors and throttles', view: 'timeSeries', stacked: false, stat: 'Sum',
      metrics: [['AWS/Lambda', 'Errors', 'FunctionName', f], ['AWS/Lambda', 'Throttles', 'FunctionName', f]] }),
    ...(c.deadLetterQueueName ? [widget(0, 24, { title: 'Dead-letter queue depth', view: 'timeSeries', stacked: false, stat: 'Maximum',
      metrics: [['AWS/SQS', 'ApproximateNumberOfMessagesVisible', 'QueueName', c.deadLetterQueueName]] })] : []),
  ];
  return Stack.of(scope).toJsonString({ widgets });
}
