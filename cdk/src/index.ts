export * from './exactly-once';
export * from './source';
export * from './store';
export { AlarmThresholds } from './alarms';
export * from './team';
