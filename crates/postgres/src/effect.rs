//! The work's own SQL, committed in the same transaction as its completion.

use std::error::Error;

use bytes::BytesMut;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

/// One SQL statement of a work's effect, with its parameters (`$1`, `$2`,
/// ...), run in the transaction of the completion it belongs to. Like a
/// DynamoDB write with a condition, a statement that changes no row is
/// refused, and with it the whole transaction
/// ([`exactly_once_core::store::StoreError::EffectConditionFailed`]); so is a statement
/// the server refuses for its data (a constraint, a check, an invalid
/// value: SQLSTATE classes 22 and 23).
///
/// ```
/// use exactly_once_postgres::SqlEffect;
///
/// let effect = SqlEffect::new(
///     "INSERT INTO receipts (payment_id, amount_cents) VALUES ($1, $2)",
/// )
/// .bind("p-1")
/// .bind(1250_i64);
/// assert_eq!(effect.params().len(), 2);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct SqlEffect {
    sql: String,
    params: Vec<SqlValue>,
    item: Option<String>,
}

impl SqlEffect {
    /// A statement without parameters yet.
    pub fn new(sql: impl Into<String>) -> Self {
        Self {
            sql: sql.into(),
            params: Vec::new(),
            item: None,
        }
    }

    /// Binds the next parameter.
    pub fn bind(mut self, value: impl Into<SqlValue>) -> Self {
        self.params.push(value.into());
        self
    }

    /// Declares the one row the statement writes (its table, key column and
    /// key), so that effects on distinct rows may share a transaction and
    /// two commits writing this row are never in flight together. Without
    /// it, a commit with this effect runs alone.
    pub fn on_row(
        mut self,
        table: impl AsRef<str>,
        key_name: impl AsRef<str>,
        key: impl AsRef<str>,
    ) -> Self {
        self.item = Some(exactly_once_core::store::increment::item_name(
            table.as_ref(),
            key_name.as_ref(),
            key.as_ref(),
        ));
        self
    }

    /// The statement.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// Its parameters, in order.
    pub fn params(&self) -> &[SqlValue] {
        &self.params
    }

    /// The row it declared it writes ([`Self::on_row`]).
    pub fn item(&self) -> Option<&str> {
        self.item.as_deref()
    }
}

/// A parameter of a statement, with its SQL type (`None`: NULL of that
/// type).
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    /// `TEXT`.
    Text(Option<String>),
    /// `BIGINT`.
    BigInt(Option<i64>),
    /// `DOUBLE PRECISION`.
    Double(Option<f64>),
    /// `BOOLEAN`.
    Bool(Option<bool>),
    /// `BYTEA`.
    Bytes(Option<Vec<u8>>),
    /// `JSONB`.
    Json(Option<serde_json::Value>),
    /// `TEXT[]`.
    TextArray(Vec<String>),
}

impl SqlValue {
    /// Its SQL type, as the statement is told.
    pub fn sql_type(&self) -> Type {
        match self {
            Self::Text(_) => Type::TEXT,
            Self::BigInt(_) => Type::INT8,
            Self::Double(_) => Type::FLOAT8,
            Self::Bool(_) => Type::BOOL,
            Self::Bytes(_) => Type::BYTEA,
            Self::Json(_) => Type::JSONB,
            Self::TextArray(_) => Type::TEXT_ARRAY,
        }
    }
}

impl From<&str> for SqlValue {
    fn from(value: &str) -> Self {
        Self::Text(Some(value.to_owned()))
    }
}

impl From<String> for SqlValue {
    fn from(value: String) -> Self {
        Self::Text(Some(value))
    }
}

impl From<Option<&str>> for SqlValue {
    fn from(value: Option<&str>) -> Self {
        Self::Text(value.map(str::to_owned))
    }
}

impl From<i64> for SqlValue {
    fn from(value: i64) -> Self {
        Self::BigInt(Some(value))
    }
}

impl From<f64> for SqlValue {
    fn from(value: f64) -> Self {
        Self::Double(Some(value))
    }
}

impl From<bool> for SqlValue {
    fn from(value: bool) -> Self {
        Self::Bool(Some(value))
    }
}

impl From<Vec<u8>> for SqlValue {
    fn from(value: Vec<u8>) -> Self {
        Self::Bytes(Some(value))
    }
}

impl From<serde_json::Value> for SqlValue {
    fn from(value: serde_json::Value) -> Self {
        Self::Json(Some(value))
    }
}

impl From<Vec<String>> for SqlValue {
    fn from(value: Vec<String>) -> Self {
        Self::TextArray(value)
    }
}

impl ToSql for SqlValue {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        match self {
            Self::Text(value) => value.to_sql(ty, out),
            Self::BigInt(value) => value.to_sql(ty, out),
            Self::Double(value) => value.to_sql(ty, out),
            Self::Bool(value) => value.to_sql(ty, out),
            Self::Bytes(value) => value.to_sql(ty, out),
            Self::Json(value) => value.to_sql(ty, out),
            Self::TextArray(value) => value.to_sql(ty, out),
        }
    }

    /// Every statement is sent with [`SqlValue::sql_type`] as its type.
    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}
