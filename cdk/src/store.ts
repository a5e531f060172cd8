// The idempotency store (the SAM template's IdempotencyStore and its
// parameters): which tables the construct creates, which variables and
// statements the function gets.

/** A table the construct creates (IdempotencyStore dynamodb). */
export interface NewDynamoDbTableProps {
  /** (TableDeletionProtection) @default true */
  readonly deletionProtection?: boolean;
  /** The demo ledger: its table (LedgerTable, which the SAM template always creates with DynamoDB) and its variables (LEDGER_TABLE, LEDGER_MODE, ...); false for a handler of your own. @default true */
  readonly demoLedger?: boolean;
  /** (DynamoDbAttemptTimeoutMs) @default 3000 */
  readonly attemptTimeoutMs?: number;
  /** (DynamoDbOperationTimeoutMs) @default 10000 */
  readonly operationTimeoutMs?: number;
}

/** A table that exists already (same schema: pk, expires_at, the started and unsent indexes). */
export interface ExistingDynamoDbTableProps {
  /** (TableDeletionProtection, of the ledger's table) @default true */
  readonly deletionProtection?: boolean;
  /** The demo ledger: its table (LedgerTable, which the SAM template creates beside an existing idempotency table too) and its variables; false for a handler of your own. @default true */
  readonly demoLedger?: boolean;
  /** An existing ledger table instead of a new one (ExistingLedgerTable): a copied template's, kept. @default a new table */
  readonly ledgerTableName?: string;
  /** (DynamoDbAttemptTimeoutMs) @default 3000 */
  readonly attemptTimeoutMs?: number;
  /** (DynamoDbOperationTimeoutMs) @default 10000 */
  readonly operationTimeoutMs?: number;
}

/** IAM database authentication (DatabaseIamAuth true). */
export interface PostgresIamAuth {
  /** db-..., cluster-... or prx-... (DatabaseResourceId). */
  readonly resourceId: string;
  /** The database user (DatabaseUser). */
  readonly user: string;
}

/** An existing PostgreSQL (IdempotencyStore postgres); the function must run in its VPC. */
export interface PostgresStoreProps {
  /** postgres://[user@]host[:port]/dbname, no password (DatabaseUrl). */
  readonly databaseUrl?: string;
  /** RDS-format credentials secret, full ARN (DatabaseSecretArn). */
  readonly secretArn?: string;
  /** @default password from secretArn */
  readonly iamAuth?: PostgresIamAuth;
  /** (SqlIdempotencyTable) @default 'idempotency' */
  readonly tableName?: string;
  /** (SqlLedgerTable) @default 'ledger' */
  readonly ledgerTableName?: string;
  /** The demo ledger's variables (LEDGER_TABLE, LEDGER_MODE, ...): false for a handler of your own. @default true */
  readonly demoLedger?: boolean;
  /** (DatabasePoolSize) @default 4 */
  readonly poolSize?: number;
  /** (DatabaseConnectTimeoutMs) @default 3000 */
  readonly connectTimeoutMs?: number;
  /** (DatabaseStatementTimeoutMs) @default 1500 */
  readonly statementTimeoutMs?: number;
}

/** A Redis / Valkey endpoint, as the store or as the duplicate cache. */
export interface RedisProps {
  /** redis:// or rediss://, AUTH in it (RedisUrl). Visible in the function's configuration. */
  readonly url: string;
  /** Cluster mode (RedisCluster). @default false */
  readonly cluster?: boolean;
  /** (RedisTimeoutMs) @default 3000 */
  readonly timeoutMs?: number;
  /** (RedisWaitReplicas) @default 0 */
  readonly waitReplicas?: number;
}

/** Redis as the idempotency store (IdempotencyStore redis). */
export interface RedisStoreProps extends RedisProps {
  /** Key namespace (SqlIdempotencyTable). @default 'idempotency' */
  readonly namespace?: string;
  /** The demo ledger's namespace (SqlLedgerTable). @default 'ledger' */
  readonly ledgerNamespace?: string;
  /** The demo ledger's variables (LEDGER_TABLE, LEDGER_MODE, ...): false for a handler of your own. @default true */
  readonly demoLedger?: boolean;
}

/** Where idempotency records live. */
export class Store {
  /** A new DynamoDB table (and the demo ledger's), retained with the stack. */
  public static newDynamoDbTable(props: NewDynamoDbTableProps = {}): Store {
    return new Store('dynamodb', 'dynamodb', props);
  }
  /** An existing DynamoDB table, by name, in the stack's account and region (ExistingIdempotencyTable): a copied template's table, kept (docs/upgrading.md). */
  public static existingDynamoDbTable(tableName: string, props: ExistingDynamoDbTableProps = {}): Store {
    return new Store('dynamodb-existing', 'dynamodb', { ...props, tableName });
  }
  /** An existing PostgreSQL database (migrated with `exactly-once-ops migrate`). */
  public static postgres(props: PostgresStoreProps): Store {
    if (!props.databaseUrl && !props.secretArn) {
      throw new Error('Store.postgres needs databaseUrl or secretArn (PostgresNeedsADatabase)');
    }
    if (!props.secretArn && !props.iamAuth) {
      throw new Error('Store.postgres needs secretArn or iamAuth for the password (PostgresNeedsADatabase)');
    }
    return new Store('postgres', 'postgres', props);
  }
  /** An existing Redis / Valkey (ElastiCache, MemoryDB). */
  public static redis(props: RedisStoreProps): Store {
    if (!props.url) throw new Error('Store.redis needs url (RedisNeedsAnEndpoint)');
    return new Store('redis', 'redis', props);
  }

  /**
   * @param kind dynamodb, dynamodb-existing, postgres or redis
   * @param backend the function's IDEMPOTENCY_STORE
   * @param props the factory's props
   */
  private constructor(
    public readonly kind: string,
    public readonly backend: string,
    public readonly props: any,
  ) {}
}

/** Where the mapping sends a batch that failed every retry (OnFailureDestination). */
export interface S3OnFailureProps {
  /** (FailedRecordsRetentionDays) @default 14 */
  readonly retentionDays?: number;
}

/** The on-failure destination of a Kafka, Kinesis or DynamoDB Streams mapping. */
export class OnFailure {
  /** A dead-letter queue created here (the default). */
  public static sqs(): OnFailure {
    return new OnFailure('sqs', {});
  }
  /** A bucket created here, whole invocation records. */
  public static s3(props: S3OnFailureProps = {}): OnFailure {
    return new OnFailure('s3', props);
  }
  /** An existing SNS topic (FailureTopicArn). */
  public static sns(topicArn: string): OnFailure {
    return new OnFailure('sns', { topicArn });
  }
  /** A topic on the same Kafka cluster (FailureTopicName); Kafka sources only. */
  public static kafka(topicName: string): OnFailure {
    return new OnFailure('kafka', { topicName });
  }
  private constructor(public readonly kind: string, public readonly props: any) {}
}
