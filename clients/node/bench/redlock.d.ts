// redlock 5's package.json "exports" hides its types from NodeNext resolution: the part the bench uses.
declare module "redlock" {
  export interface Lock {
    release(): Promise<unknown>;
  }
  export default class Redlock {
    constructor(clients: unknown[], settings?: Record<string, unknown>);
    on(event: "error", listener: (err: unknown) => void): this;
    acquire(resources: string[], duration: number): Promise<Lock>;
  }
}
