//! Which stores a handler runs on: what [`run`](crate::run) needs to know
//! before it picks the store `IDEMPOTENCY_STORE` names.
//!
//! A handler generic over the store's effect (`impl<E> RecordHandler<E>`)
//! runs on every store this build has ([`Serve`] holds for it as it is). A
//! handler whose effects are one store's writes (DynamoDB
//! `TransactWriteItem`s) is wrapped in [`Only`] ([`crate::dynamodb::only`]):
//! on another store, `run` stops at start with
//! [`StartError::WrongStore`].

use std::marker::PhantomData;

use exactly_once_core::engine::{
    CommitPath, Completion, FencingToken, HandlerError, RecordHandler,
};
use exactly_once_lambda::{FromRecord, KafkaRecord};

use crate::StartError;

mod sealed {
    /// Only this crate says which handlers [`super::Serve`] holds for.
    pub trait Sealed {}
}

/// A handler [`run`](crate::run) can serve, and on which stores: every
/// store of the build for a handler generic over the store's effect; one
/// store for a handler in [`Only`]. Implemented by this crate alone.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot run on every idempotency store this build has",
    note = "a handler runs on every store when it is generic over the effect: \
            impl<E: Send + Sync + 'static> RecordHandler<E> for ...",
    note = "a handler whose effects are one store's writes runs on that store alone: \
            exactly_once::run(exactly_once::dynamodb::only(handler))"
)]
pub trait Serve: sealed::Sealed + Send + Sync + Sized + 'static {
    /// The handler on DynamoDB.
    #[cfg(feature = "dynamodb")]
    #[doc(hidden)]
    type OnDynamoDb: RecordHandler<exactly_once_dynamodb::TransactWriteItem, Record: FromRecord>;
    /// The handler on PostgreSQL.
    #[cfg(feature = "postgres")]
    #[doc(hidden)]
    type OnPostgres: RecordHandler<exactly_once_postgres::SqlEffect, Record: FromRecord>;
    /// The handler on Redis.
    #[cfg(feature = "redis")]
    #[doc(hidden)]
    type OnRedis: RecordHandler<exactly_once_redis::RedisEffect, Record: FromRecord>;

    /// The handler for DynamoDB, or why it cannot run there.
    #[cfg(feature = "dynamodb")]
    #[doc(hidden)]
    fn on_dynamodb(self) -> Result<Self::OnDynamoDb, StartError>;
    /// The handler for PostgreSQL, or why it cannot run there.
    #[cfg(feature = "postgres")]
    #[doc(hidden)]
    fn on_postgres(self) -> Result<Self::OnPostgres, StartError>;
    /// The handler for Redis, or why it cannot run there.
    #[cfg(feature = "redis")]
    #[doc(hidden)]
    fn on_redis(self) -> Result<Self::OnRedis, StartError>;
}

/// One trait per store: the handler's bound on it when the store is built
/// in, none when it is left out (so that the blanket [`Serve`] asks only
/// for the stores of the build).
macro_rules! runs_on {
    ($feature:literal, $name:ident, $effect:ty) => {
        #[cfg(feature = $feature)]
        #[doc(hidden)]
        pub trait $name: RecordHandler<$effect, Record: FromRecord> {}
        #[cfg(feature = $feature)]
        impl<H: RecordHandler<$effect, Record: FromRecord>> $name for H {}
        #[cfg(not(feature = $feature))]
        #[doc(hidden)]
        pub trait $name {}
        #[cfg(not(feature = $feature))]
        impl<H> $name for H {}
    };
}
runs_on!(
    "dynamodb",
    RunsOnDynamoDb,
    exactly_once_dynamodb::TransactWriteItem
);
runs_on!("postgres", RunsOnPostgres, exactly_once_postgres::SqlEffect);
runs_on!("redis", RunsOnRedis, exactly_once_redis::RedisEffect);

impl<H> sealed::Sealed for H where H: RunsOnDynamoDb + RunsOnPostgres + RunsOnRedis {}

/// A handler generic over the store's effect runs on every store.
impl<H> Serve for H
where
    H: RunsOnDynamoDb + RunsOnPostgres + RunsOnRedis + Send + Sync + 'static,
{
    #[cfg(feature = "dynamodb")]
    type OnDynamoDb = H;
    #[cfg(feature = "postgres")]
    type OnPostgres = H;
    #[cfg(feature = "redis")]
    type OnRedis = H;

    #[cfg(feature = "dynamodb")]
    fn on_dynamodb(self) -> Result<H, StartError> {
        Ok(self)
    }
    #[cfg(feature = "postgres")]
    fn on_postgres(self) -> Result<H, StartError> {
        Ok(self)
    }
    #[cfg(feature = "redis")]
    fn on_redis(self) -> Result<H, StartError> {
        Ok(self)
    }
}

/// A handler whose effects are the writes of one store (`S`, the store's
/// type): [`run`](crate::run) serves it on that store, and stops at start
/// on any other. Made by `exactly_once::dynamodb::only(handler)` (and the
/// `postgres` and `redis` modules' `only`).
pub struct Only<S, H> {
    handler: H,
    store: PhantomData<fn() -> S>,
}

impl<S, H> Only<S, H> {
    /// `handler`, on the store `S` alone.
    pub fn new(handler: H) -> Self {
        Self {
            handler,
            store: PhantomData,
        }
    }
}

/// What [`Only`] hands `run` for the stores it does not run on: never
/// built, so never run.
#[doc(hidden)]
#[allow(dead_code)] // built only with two stores or more
pub enum Unsupported {}

impl<E: Send + Sync + 'static> RecordHandler<E> for Unsupported {
    type Record = KafkaRecord;

    fn commit_path(&self) -> CommitPath {
        match *self {}
    }

    async fn handle(
        &self,
        _: &FencingToken,
        _: &KafkaRecord,
    ) -> Result<Completion<E>, HandlerError> {
        match *self {}
    }
}

/// `Only<$store, H>`: the handler on `$kind`, [`StartError::WrongStore`]
/// on every other store of the build.
macro_rules! only {
    ($feature:literal, $store:ty, $kind:expr, $effect:ty, $on:ident, $assoc:ident) => {
        #[cfg(feature = $feature)]
        impl<H: RecordHandler<$effect, Record: FromRecord>> sealed::Sealed for Only<$store, H> {}

        #[cfg(feature = $feature)]
        impl<H: RecordHandler<$effect, Record: FromRecord>> Serve for Only<$store, H> {
            #[cfg(feature = "dynamodb")]
            type OnDynamoDb = only!(@assoc $assoc, OnDynamoDb, H);
            #[cfg(feature = "postgres")]
            type OnPostgres = only!(@assoc $assoc, OnPostgres, H);
            #[cfg(feature = "redis")]
            type OnRedis = only!(@assoc $assoc, OnRedis, H);

            #[cfg(feature = "dynamodb")]
            fn on_dynamodb(self) -> Result<Self::OnDynamoDb, StartError> {
                only!(@on $on, on_dynamodb, self, $kind, exactly_once_lambda::StoreKind::DynamoDb)
            }
            #[cfg(feature = "postgres")]
            fn on_postgres(self) -> Result<Self::OnPostgres, StartError> {
                only!(@on $on, on_postgres, self, $kind, exactly_once_lambda::StoreKind::Postgres)
            }
            #[cfg(feature = "redis")]
            fn on_redis(self) -> Result<Self::OnRedis, StartError> {
                only!(@on $on, on_redis, self, $kind, exactly_once_lambda::StoreKind::Redis)
            }
        }
    };
    (@assoc OnDynamoDb, OnDynamoDb, $h:ident) => { $h };
    (@assoc OnPostgres, OnPostgres, $h:ident) => { $h };
    (@assoc OnRedis, OnRedis, $h:ident) => { $h };
    (@assoc $own:ident, $other:ident, $h:ident) => { Unsupported };
    (@on on_dynamodb, on_dynamodb, $self:ident, $kind:expr, $chosen:expr) => { Ok($self.handler) };
    (@on on_postgres, on_postgres, $self:ident, $kind:expr, $chosen:expr) => { Ok($self.handler) };
    (@on on_redis, on_redis, $self:ident, $kind:expr, $chosen:expr) => { Ok($self.handler) };
    (@on $own:ident, $other:ident, $self:ident, $kind:expr, $chosen:expr) => {
        Err(StartError::WrongStore {
            handler_store: $kind,
            chosen: $chosen,
        })
    };
}
only!(
    "dynamodb",
    exactly_once_dynamodb::DynamoDbStore,
    exactly_once_lambda::StoreKind::DynamoDb,
    exactly_once_dynamodb::TransactWriteItem,
    on_dynamodb,
    OnDynamoDb
);
only!(
    "postgres",
    exactly_once_postgres::PostgresStore,
    exactly_once_lambda::StoreKind::Postgres,
    exactly_once_postgres::SqlEffect,
    on_postgres,
    OnPostgres
);
only!(
    "redis",
    exactly_once_redis::RedisStore,
    exactly_once_lambda::StoreKind::Redis,
    exactly_once_redis::RedisEffect,
    on_redis,
    OnRedis
);
