// ExactlyOnce: around a team's function, the resources, variables and role
// statements the SAM template (template.yaml) creates around its own.
import { Annotations, Aws, Duration, Fn, RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as cw from 'aws-cdk-lib/aws-cloudwatch';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { createAlarms, dashboardBody } from './alarms';
import { refuseBrokenCombinations } from './guards';
import { statements } from './iam';
import { mappingProps } from './mapping';
import { OnFailure, RedisProps, Store } from './store';
import { Source } from './source';
import { Destination, grantHandlerTable } from './team';

/** Redis caching COMPLETED keys in front of DynamoDB or PostgreSQL (DuplicateCache redis). */
export interface DuplicateCacheProps extends RedisProps {
  /** (DuplicateCacheTimeoutMs) @default 50 */
  readonly cacheTimeoutMs?: number;
}

/** Props of ExactlyOnce: the SAM template's parameters a team changes; defaults are theirs. */
export interface ExactlyOnceProps {
  /** The function (a RustFunction on the exactly-once crate). */
  readonly function: lambda.Function;
  /** The one event source. */
  readonly source: Source;
  /** @default Store.newDynamoDbTable() */
  readonly store?: Store;
  /**
   * Your handler's own tables, by the variable it reads each one's name from
   * (e.g. `{ ORDERS_TABLE: orders }`): the variable set, read and write
   * granted (an effect commits in a transaction with the key's completion).
   * @default none
   */
  readonly tables?: Record<string, dynamodb.ITable>;
  /**
   * Where your handler emits messages, by the variable it reads each one's
   * name from (e.g. `{ ORDER_EVENTS_BUS: Destination.eventBus(bus) }`): the
   * variable set, sending granted. Each kind needs its cargo feature
   * (`Destination.feature`; all of them: `cargoFeatures`).
   * @default none
   */
  readonly destinations?: Record<string, Destination>;

  /** (BatchSize; a FIFO queue uses at most 10) @default 100 */
  readonly batchSize?: number;
  /** (MaximumBatchingWindowInSeconds) @default Duration.seconds(1) */
  readonly maxBatchingWindow?: Duration;
  /** Kafka, Kinesis, DynamoDB Streams (MaximumRetryAttempts) @default 5 */
  readonly retryAttempts?: number;
  /** Kafka, Kinesis, DynamoDB Streams (MaximumRecordAgeInSeconds) @default never (-1) */
  readonly maxRecordAge?: Duration;
  /** A Lambda event filter pattern, JSON (FilterPattern) @default every record */
  readonly filterPattern?: string;
  /** Kafka, Kinesis, DynamoDB Streams (OnFailureDestination) @default OnFailure.sqs() */
  readonly onFailure?: OnFailure;
  /** The dead-letter and parked-records queues' retention (DlqRetentionSeconds) @default Duration.days(14) */
  readonly dlqRetention?: Duration;

  /** header, record-key, deduplication-id, message-id or json:/pointer, comma-separated (IdempotencyKeySource) @default 'header' */
  readonly keySource?: string;
  /** (IdempotencyKeyHeader) @default 'idempotency-key' */
  readonly keyHeader?: string;
  /** reject, record-coordinates or payload-hash (MissingKeyPolicy) @default 'reject' */
  readonly missingKeyPolicy?: string;
  /** e.g. payments# (IdempotencyKeyPrefix); also limits the DynamoDB statement to it @default none */
  readonly keyPrefix?: string;
  /** (IdempotencyScope) @default the function's name */
  readonly scope?: string;
  /** raw, canonical-json or json:/field,... (PayloadHash) @default 'raw' */
  readonly payloadHash?: string;
  /** reject or hash (LongKeyPolicy) @default 'reject' */
  readonly longKeyPolicy?: string;
  /** park or report (PoisonPolicy) @default 'park' */
  readonly poisonPolicy?: string;
  /** (LockTimeoutSeconds) @default Duration.seconds(30) */
  readonly lockTimeout?: Duration;
  /** The TTL of idempotency records (RecordRetentionSeconds) @default Duration.days(8) */
  readonly recordRetention?: Duration;
  /** (SafetyMarginMs) @default 5000 */
  readonly safetyMarginMs?: number;
  /** partition, key or none (OrderingMode) @default 'partition' */
  readonly orderingMode?: string;
  /** (MaxInFlight) @default 64 */
  readonly maxInFlight?: number;
  /** (ClaimAhead) @default 50 */
  readonly claimAhead?: number;
  /** (CompletedCacheSize) @default 10000 */
  readonly completedCacheSize?: number;
  /** (MaxRecordsPerTransaction) @default 99 */
  readonly maxRecordsPerTransaction?: number;
  /** plain or hash (LogKeys) @default 'plain' */
  readonly logKeys?: string;
  /** Demo ledger: lock-free, transactional or direct (LedgerMode) @default 'lock-free' */
  readonly ledgerMode?: string;
  /** Demo ledger (LedgerMinBalanceCents) @default unbounded */
  readonly ledgerMinBalanceCents?: string;
  /** Demo ledger: none, sqs, sqs-fifo or kafka (LedgerEvents) @default 'none' */
  readonly ledgerEvents?: string;
  /** Demo ledger, ledgerEvents 'kafka': the existing topic on the source's MSK cluster (LedgerEventsTopicName) @default none */
  readonly ledgerEventsTopicName?: string;
  /** Demo ledger, ledgerEvents 'kafka': the cluster's IAM brokers, host:port (LedgerEventsBootstrapServers) @default none */
  readonly ledgerEventsBootstrapServers?: string[];
  /** off or otlp (Tracing's TRACING_EXPORT; the function's own tracing is yours) @default 'off' */
  readonly tracingExport?: string;
  /** @default none */
  readonly duplicateCache?: DuplicateCacheProps;

  /** (LogRetentionInDays) @default logs.RetentionDays.ONE_MONTH */
  readonly logRetention?: logs.RetentionDays;
  /** The scheduled stuck-key check and sweep (StuckKeyCheck); disabled: the rule exists, DISABLED @default true */
  readonly stuckKeyCheck?: boolean;
  /** Subscribed to the alarm topic (AlarmEmail) @default none */
  readonly alarmEmail?: string;
  /** (OffsetLagThreshold) @default 10000 */
  readonly offsetLagThreshold?: number;
  /** (IteratorAgeAlarmThresholdMs) @default 60000 */
  readonly iteratorAgeAlarmThresholdMs?: number;
  /** (OldestMessageAgeAlarmSeconds) @default 600 */
  readonly oldestMessageAgeAlarmSeconds?: number;
  /** (MqQueueDepthAlarmThreshold) @default 10000 */
  readonly mqQueueDepthAlarmThreshold?: number;
  /** (TakenOverAlarmThreshold) @default 10 */
  readonly takenOverAlarmThreshold?: number;
  /** (LockLostAlarmThreshold) @default 10 */
  readonly lockLostAlarmThreshold?: number;
  /** (StoreErrorAlarmThreshold) @default 0 */
  readonly storeErrorAlarmThreshold?: number;
  /** (StoreLatencyP99AlarmMs) @default 200 */
  readonly storeLatencyP99AlarmMs?: number;
  /** (StuckKeyAgeAlarmSeconds) @default 1800 */
  readonly stuckKeyAgeAlarmSeconds?: number;
  /** (UnsentAgeAlarmSeconds) @default 1800 */
  readonly unsentAgeAlarmSeconds?: number;
  /** @default STACKNAME-exactly-once, as the SAM template */
  readonly dashboardName?: string;
}

export class ExactlyOnce extends Construct {
  /** The idempotency table, when the construct creates it. */
  public readonly table?: dynamodb.Table;
  /** The demo ledger's table, when the construct creates it. */
  public readonly ledgerTable?: dynamodb.Table;
  /** The mapping's on-failure queue (OnFailure.sqs()). */
  public readonly deadLetterQueue?: sqs.Queue;
  /** Where the function parks poison records whole. */
  public readonly parkedRecordsQueue: sqs.Queue;
  /** The mapping's on-failure bucket (OnFailure.s3()). */
  public readonly failedRecordsBucket?: s3.Bucket;
  public readonly eventSourceMapping: lambda.CfnEventSourceMapping;
  public readonly alarmTopic: sns.Topic;
  public readonly alarms: cw.Alarm[];
  public readonly logGroup: logs.LogGroup;
  /**
   * The cargo features of `exactly-once` the function's build needs for the
   * variables set here (`sqs` always: the parked-records queue), also shown
   * at synth (`exactly-once:features`): a build without one stops at start,
   * naming it.
   */
  public readonly cargoFeatures: string[];

  constructor(scope: Construct, id: string, props: ExactlyOnceProps) {
    super(scope, id);
    const fn = props.function;
    const source = props.source;
    const store = props.store ?? Store.newDynamoDbTable();
    const stack = Stack.of(this);
    const sp = store.props;
    const onFailure = source.hasOnFailureDestination ? (props.onFailure ?? OnFailure.sqs()) : undefined;
    const keyPrefix = props.keyPrefix ?? '';
    const keySource = props.keySource ?? 'header';
    const missingKeyPolicy = props.missingKeyPolicy ?? 'reject';
    const retention = props.dlqRetention ?? Duration.days(14);
    const maxRecordAge = props.maxRecordAge ? props.maxRecordAge.toSeconds() : -1;
    const ledgerEvents = props.ledgerEvents ?? 'none';
    // The demo ledger (the shipped msk-handler's): its table and variables, or none.
    const demoLedger = !!sp.ledgerTableName || (sp.demoLedger ?? true);

    // The SAM template's Rules, where a construct can check them.
    if ((source.kind === 'kinesis' || source.kind === 'dynamodb-streams') && keySource === 'header' && missingKeyPolicy === 'reject') {
      throw new Error('Kinesis and DynamoDB Streams records have no headers: set keySource to json:/pointer or record-key (StreamRecordsHaveNoHeaders)');
    }
    if (maxRecordAge !== -1 && maxRecordAge < 60) throw new Error('maxRecordAge must be 60 s or more (RecordAgeIsInfiniteOrAMinute)');
    if (props.onFailure?.kind === 'kafka' && source.eventSource !== 'kafka') throw new Error('OnFailure.kafka is for Kafka sources (KafkaDestinationNeedsAnotherTopic)');
    if (onFailure?.kind === 'kafka' && onFailure.props.topicName === source.props.topic) throw new Error('OnFailure.kafka needs another topic than the source\'s');
    if (!demoLedger && (ledgerEvents !== 'none' || props.ledgerMode || props.ledgerMinBalanceCents)) {
      throw new Error('ledgerEvents, ledgerMode and ledgerMinBalanceCents are the demo ledger\'s: the store has demoLedger false');
    }
    if (ledgerEvents === 'kafka') {
      if (source.kind !== 'kafka-msk') throw new Error('ledgerEvents kafka announces to a topic of the MSK source\'s cluster (LedgerEventsToKafkaNeedMskATopicAndAVpc)');
      if (!props.ledgerEventsTopicName || !props.ledgerEventsBootstrapServers?.length) throw new Error('ledgerEvents kafka needs ledgerEventsTopicName and ledgerEventsBootstrapServers');
      if (props.ledgerEventsTopicName === source.props.topic) throw new Error('ledgerEventsTopicName must not be the source\'s topic');
    }
    if (props.duplicateCache && store.backend === 'redis') throw new Error('duplicateCache is for DynamoDB or PostgreSQL stores (DuplicateCacheNeedsADurableStore)');
    const needsVpc = store.backend === 'postgres' || store.backend === 'redis' || !!props.duplicateCache || source.kind === 'kafka-self-managed'
      || ledgerEvents === 'kafka';
    if (needsVpc && !fn.isBoundToVpc) {
      Annotations.of(this).addWarningV2('exactly-once:vpc',
        'PostgreSQL, Redis, self-managed Kafka and an MSK topic to announce to are reached inside their VPC: give the function vpc/vpcSubnets/securityGroups');
    }
    // Combinations that cannot work: refused, naming the setting and the fix.
    const timeout = fn.timeout?.toSeconds() ?? 3;
    const window = props.maxBatchingWindow ?? Duration.seconds(1);
    refuseBrokenCombinations({
      source, timeoutSeconds: timeout, lockTimeout: props.lockTimeout ?? Duration.seconds(30),
      safetyMarginMs: props.safetyMarginMs ?? 5000, maxBatchingWindow: window,
      retryAttempts: props.retryAttempts, maxRecordAge: props.maxRecordAge, onFailureGiven: props.onFailure !== undefined,
      sqsVisibilityTimeout: source.kind === 'sqs' ? source.props.visibilityTimeout : undefined,
    });
    // The SAM template's default Timeout (120 s) outlasts a lease and the safety
    // margin, so that an invocation can wait out a crashed worker's lease.
    const needed = (props.lockTimeout ?? Duration.seconds(30)).toSeconds() + (props.safetyMarginMs ?? 5000) / 1000;
    if (timeout <= needed) {
      Annotations.of(this).addWarningV2('exactly-once:timeout',
        `the function's timeout (${timeout} s) should exceed lockTimeout + safetyMarginMs (${needed} s): give it timeout: Duration.seconds(120)`);
    }

    // The idempotency store.
    let tableName = '';
    let tableArn: string | undefined;
    let ledgerName = '';
    let ledgerTableArn: string | undefined;
    if (store.kind === 'dynamodb' || store.kind === 'dynamodb-existing') {
      const common = {
        billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
        pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
        encryption: dynamodb.TableEncryption.AWS_MANAGED,
        deletionProtection: sp.deletionProtection ?? true,
        removalPolicy: RemovalPolicy.RETAIN,
      };
      if (store.kind === 'dynamodb') {
        this.table = new dynamodb.Table(this, 'IdempotencyTable', {
          ...common,
          partitionKey: { name: 'pk', type: dynamodb.AttributeType.STRING },
          timeToLiveAttribute: 'expires_at',
        });
        // Sparse indexes: STARTED items (stuck-key check), COMPLETED items with unsent messages (sweep).
        for (const [indexName, key] of [['started', 'started_shard'], ['unsent', 'outbox_shard']]) {
          this.table.addGlobalSecondaryIndex({ indexName, partitionKey: { name: key, type: dynamodb.AttributeType.NUMBER }, projectionType: dynamodb.ProjectionType.ALL });
        }
        tableName = this.table.tableName;
        tableArn = this.table.tableArn;
      } else {
        // ExistingIdempotencyTable: the table a copied template created, kept.
        tableName = sp.tableName;
        tableArn = stack.formatArn({ service: 'dynamodb', resource: 'table', resourceName: sp.tableName });
      }
      if (sp.ledgerTableName) {
        // ExistingLedgerTable: the ledger a copied template created, kept.
        ledgerName = sp.ledgerTableName;
        ledgerTableArn = stack.formatArn({ service: 'dynamodb', resource: 'table', resourceName: sp.ledgerTableName });
      } else if (demoLedger) {
        this.ledgerTable = new dynamodb.Table(this, 'LedgerTable', { ...common, partitionKey: { name: 'account_id', type: dynamodb.AttributeType.STRING } });
        ledgerName = this.ledgerTable.tableName;
        ledgerTableArn = this.ledgerTable.tableArn;
      }
    } else if (store.kind === 'postgres') {
      tableName = sp.tableName ?? 'idempotency';
      ledgerName = demoLedger ? (sp.ledgerTableName ?? 'ledger') : '';
    } else {
      tableName = sp.namespace ?? 'idempotency';
      ledgerName = demoLedger ? (sp.ledgerNamespace ?? 'ledger') : '';
    }

    // Queues and the bucket.
    let ledgerEventsQueue: sqs.Queue | undefined;
    if (ledgerEvents === 'sqs' || ledgerEvents === 'sqs-fifo') {
      ledgerEventsQueue = new sqs.Queue(this, 'LedgerEventsQueue', {
        fifo: ledgerEvents === 'sqs-fifo' ? true : undefined,
        encryption: sqs.QueueEncryption.SQS_MANAGED,
      });
    }
    if (onFailure?.kind === 'sqs') {
      this.deadLetterQueue = new sqs.Queue(this, 'DeadLetterQueue', { encryption: sqs.QueueEncryption.SQS_MANAGED, retentionPeriod: retention });
    }
    this.parkedRecordsQueue = new sqs.Queue(this, 'ParkedRecordsQueue', { encryption: sqs.QueueEncryption.SQS_MANAGED, retentionPeriod: retention });
    if (onFailure?.kind === 's3') {
      this.failedRecordsBucket = new s3.Bucket(this, 'FailedRecordsBucket', {
        encryption: s3.BucketEncryption.S3_MANAGED,
        blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
        objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        versioned: true,
        enforceSSL: true,
        removalPolicy: RemovalPolicy.RETAIN,
        lifecycleRules: [
          { id: 'ExpireFailedRecords', expiration: Duration.days(onFailure.props.retentionDays ?? 14),
            noncurrentVersionExpiration: Duration.days(7), abortIncompleteMultipartUploadAfter: Duration.days(1) },
          { id: 'RemoveExpiredDeleteMarkers', expiredObjectDeleteMarker: true },
        ],
      });
    }

    // The log group, and the function's logging as the SAM template's.
    this.logGroup = new logs.LogGroup(this, 'FunctionLogGroup', {
      retention: props.logRetention ?? logs.RetentionDays.ONE_MONTH,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    const cfnFunction = fn.node.defaultChild as lambda.CfnFunction;
    cfnFunction.loggingConfig = { logFormat: 'JSON', applicationLogLevel: 'INFO', systemLogLevel: 'WARN', logGroup: this.logGroup.logGroupName };

    // Every variable the SAM template sets; "" means unset.
    const isDynamo = store.backend === 'dynamodb';
    const isPg = store.backend === 'postgres';
    const redis: RedisProps | undefined = store.backend === 'redis' ? sp : props.duplicateCache;
    const env: Record<string, string> = {
      IDEMPOTENCY_STORE: store.backend,
      IDEMPOTENCY_TABLE: tableName,
      DYNAMODB_ATTEMPT_TIMEOUT_MS: isDynamo ? String(sp.attemptTimeoutMs ?? 3000) : '',
      DYNAMODB_OPERATION_TIMEOUT_MS: isDynamo ? String(sp.operationTimeoutMs ?? 10000) : '',
      DATABASE_URL: isPg ? (sp.databaseUrl ?? '') : '',
      DATABASE_SECRET_ARN: isPg ? (sp.secretArn ?? '') : '',
      DATABASE_IAM_AUTH: isPg && sp.iamAuth ? 'true' : 'false',
      DATABASE_POOL_SIZE: isPg ? String(sp.poolSize ?? 4) : '',
      DATABASE_CONNECT_TIMEOUT_MS: isPg ? String(sp.connectTimeoutMs ?? 3000) : '',
      DATABASE_STATEMENT_TIMEOUT_MS: isPg ? String(sp.statementTimeoutMs ?? 1500) : '',
      DATABASE_MIGRATE: 'false',
      REDIS_URL: redis ? redis.url : '',
      REDIS_TIMEOUT_MS: redis ? String(redis.timeoutMs ?? 3000) : '',
      REDIS_WAIT_REPLICAS: redis ? String(redis.waitReplicas ?? 0) : '',
      REDIS_CA_FILE: '',
      REDIS_CLUSTER: redis ? String(redis.cluster ?? false) : '',
      DUPLICATE_CACHE: props.duplicateCache ? 'redis' : 'none',
      DUPLICATE_CACHE_TIMEOUT_MS: String(props.duplicateCache?.cacheTimeoutMs ?? 50),
      IDEMPOTENCY_KEY_HEADER: props.keyHeader ?? 'idempotency-key',
      IDEMPOTENCY_KEY_SOURCE: keySource,
      MISSING_KEY_POLICY: missingKeyPolicy,
      IDEMPOTENCY_KEY_PREFIX: keyPrefix,
      IDEMPOTENCY_SCOPE: props.scope ?? '',
      PAYLOAD_HASH: props.payloadHash ?? 'raw',
      LONG_KEY_POLICY: props.longKeyPolicy ?? 'reject',
      POISON_POLICY: props.poisonPolicy ?? 'park',
      DEAD_LETTER_QUEUE_URL: this.parkedRecordsQueue.queueUrl,
      LOCK_TIMEOUT_SECONDS: String((props.lockTimeout ?? Duration.seconds(30)).toSeconds()),
      RECORD_RETENTION_SECONDS: String((props.recordRetention ?? Duration.seconds(691200)).toSeconds()),
      SAFETY_MARGIN_MS: String(props.safetyMarginMs ?? 5000),
      ORDERING_MODE: props.orderingMode ?? 'partition',
      MAX_IN_FLIGHT: String(props.maxInFlight ?? 64),
      CLAIM_AHEAD: String(props.claimAhead ?? 50),
      COMPLETED_CACHE_SIZE: String(props.completedCacheSize ?? 10000),
      MAX_RECORDS_PER_TRANSACTION: String(props.maxRecordsPerTransaction ?? 99),
      LOG_KEYS: props.logKeys ?? 'plain',
      TRACING_EXPORT: props.tracingExport ?? 'off',
      EVENT_SOURCES: source.eventSource,
    };
    if (demoLedger) {
      Object.assign(env, {
        LEDGER_TABLE: ledgerName,
        LEDGER_MODE: props.ledgerMode ?? 'lock-free',
        LEDGER_MIN_BALANCE_CENTS: props.ledgerMinBalanceCents ?? '',
        LEDGER_EVENTS_QUEUE_URL: ledgerEventsQueue ? ledgerEventsQueue.queueUrl : '',
        LEDGER_EVENTS_DESTINATION: ledgerEvents === 'kafka'
          ? `kafka://${props.ledgerEventsBootstrapServers!.join(',')}/${props.ledgerEventsTopicName}?auth=iam` : '',
      });
    }
    // The team's own tables and destinations: a variable each, never one of ours.
    const own: Record<string, string> = {};
    for (const [name, table] of Object.entries(props.tables ?? {})) own[name] = table.tableName;
    for (const [name, to] of Object.entries(props.destinations ?? {})) own[name] = to.name;
    for (const name of Object.keys(own)) {
      if (name in env) throw new Error(`${name} is a variable the construct sets: name your table or destination's variable otherwise`);
    }
    for (const [name, value] of Object.entries({ ...env, ...own })) fn.addEnvironment(name, value);
    for (const table of Object.values(props.tables ?? {})) grantHandlerTable(table, fn);
    for (const to of Object.values(props.destinations ?? {})) to.grantSend(fn);

    // The crate's features these variables need (a build without one refuses to start).
    const features = new Set(['sqs']);
    if (store.backend !== 'dynamodb') features.add(store.backend);
    if (props.duplicateCache) features.add('redis');
    if (props.tracingExport === 'otlp') features.add('opentelemetry');
    if (ledgerEvents === 'kafka') features.add('kafka');
    for (const to of Object.values(props.destinations ?? {})) features.add(to.feature);
    this.cargoFeatures = [...features].sort();
    Annotations.of(this).addInfo(`exactly-once:features: build the function with exactly-once's features ${JSON.stringify(this.cargoFeatures)}`);

    // The role: the SAM role's managed policies (Basic is the CDK's own;
    // it adds VPC access itself to a function in a VPC) and statements.
    const managed = ['AWSXrayWriteOnlyAccess'];
    if (!fn.isBoundToVpc) managed.push('service-role/AWSLambdaVPCAccessExecutionRole');
    if (source.kind === 'kafka-msk') managed.push('service-role/AWSLambdaMSKExecutionRole');
    for (const name of managed) fn.role?.addManagedPolicy(iam.ManagedPolicy.fromAwsManagedPolicyName(name));
    let destination: string | undefined;
    if (onFailure?.kind === 'sqs') destination = this.deadLetterQueue!.queueArn;
    else if (onFailure?.kind === 's3') destination = this.failedRecordsBucket!.bucketArn;
    else if (onFailure?.kind === 'sns') destination = onFailure.props.topicArn;
    else if (onFailure?.kind === 'kafka') destination = `kafka://${onFailure.props.topicName}`;
    for (const statement of statements(this, {
      source, tableArn, keyPrefix, ledgerTableArn,
      postgres: isPg ? sp : undefined,
      ledgerEventsQueueArn: ledgerEventsQueue?.queueArn,
      ledgerEventsKafkaTopic: ledgerEvents === 'kafka' ? props.ledgerEventsTopicName : undefined,
      deadLetterQueueArn: this.deadLetterQueue?.queueArn,
      failedRecordsBucketArn: this.failedRecordsBucket?.bucketArn,
      failureTopicArn: onFailure?.kind === 'sns' ? onFailure.props.topicArn : undefined,
      failureKafkaTopic: onFailure?.kind === 'kafka' ? onFailure.props.topicName : undefined,
      parkedRecordsQueueArn: this.parkedRecordsQueue.queueArn,
    })) fn.addToRolePolicy(statement);

    // The event source mapping, after the role and its policy.
    this.eventSourceMapping = new lambda.CfnEventSourceMapping(this, 'EventSourceMapping', mappingProps(source, {
      functionName: fn.functionName,
      batchSize: props.batchSize ?? 100,
      maxBatchingWindowSeconds: (props.maxBatchingWindow ?? Duration.seconds(1)).toSeconds(),
      retryAttempts: props.retryAttempts ?? 5,
      maxRecordAgeSeconds: maxRecordAge,
      filterPattern: props.filterPattern,
      onFailureDestination: destination,
    }));
    if (fn.role) this.eventSourceMapping.node.addDependency(fn.role);

    // The stuck-key check, every 5 minutes (DISABLED when off, as SAM).
    new events.Rule(this, 'StuckKeyCheck', {
      schedule: events.Schedule.rate(Duration.minutes(5)),
      description: 'Lists the STARTED keys of the idempotency store and emits StuckKeys and OldestStartedAgeSeconds; sends emitted messages left unsent.',
      enabled: props.stuckKeyCheck ?? true,
      targets: [new targets.LambdaFunction(fn)],
    });

    // Alarms, their topic and the dashboard.
    this.alarmTopic = new sns.Topic(this, 'AlarmTopic', { displayName: 'msk-exactly-once alarms' });
    if (props.alarmEmail) {
      new sns.Subscription(this, 'AlarmEmailSubscription', { topic: this.alarmTopic, protocol: sns.SubscriptionProtocol.EMAIL, endpoint: props.alarmEmail });
    }
    const alarmContext = {
      topic: this.alarmTopic,
      functionName: fn.functionName,
      source,
      deadLetterQueueName: this.deadLetterQueue?.queueName,
      stuckKeyCheck: props.stuckKeyCheck ?? true,
      thresholds: {
        offsetLag: props.offsetLagThreshold ?? 10000,
        iteratorAgeMs: props.iteratorAgeAlarmThresholdMs ?? 60000,
        oldestMessageAgeSeconds: props.oldestMessageAgeAlarmSeconds ?? 600,
        mqQueueDepth: props.mqQueueDepthAlarmThreshold ?? 10000,
        takenOver: props.takenOverAlarmThreshold ?? 10,
        lockLost: props.lockLostAlarmThreshold ?? 10,
        storeErrors: props.storeErrorAlarmThreshold ?? 0,
        storeLatencyP99Ms: props.storeLatencyP99AlarmMs ?? 200,
        stuckKeyAgeSeconds: props.stuckKeyAgeAlarmSeconds ?? 1800,
        unsentAgeSeconds: props.unsentAgeAlarmSeconds ?? 1800,
      },
    };
    this.alarms = createAlarms(this, alarmContext);
    new cw.CfnDashboard(this, 'OperationsDashboard', {
      dashboardName: props.dashboardName ?? Fn.join('', [Aws.STACK_NAME, '-exactly-once']),
      dashboardBody: dashboardBody(this, alarmContext),
    });
  }
}
