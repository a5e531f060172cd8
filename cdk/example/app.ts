// The shipped msk-handler as a RustFunction, ExactlyOnce around it; source and
// store from the context (cdk synth -c source=sqs -c store=postgres).
// EXACTLY_ONCE_SKIP_BUNDLING=1: synthesize without building the Rust code.
import { App } from 'aws-cdk-lib';
import { exampleStack } from './stack';

const skip = process.env.EXACTLY_ONCE_SKIP_BUNDLING === '1';
const app = new App({ postCliContext: skip ? { 'aws:cdk:bundling-stacks': [] } : {} });
exampleStack(app, String(app.node.tryGetContext('source') ?? 'kafka-msk'), String(app.node.tryGetContext('store') ?? 'dynamodb'));
