// Starts the real `actorllm serve` on a free loopback port (--port 0; the port is read back from the log line
// "Listening on http://127.0.0.1:PORT"), waits for /health 200, and stops it with SIGTERM, expecting exit 0.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '..', '..');
/** The shared data folder: $ACTORLLM_SHARED, else ../shared next to the repository. */
export const sharedDir = path.resolve(process.env.ACTORLLM_SHARED || path.join(repoRoot, '..', 'shared'));
export const modelDir = path.join(sharedDir, 'models', 'stories260K');

function binaryPath() {
  const bin = process.env.ACTORLLM_BIN || path.join(repoRoot, 'build', 'actorllm');
  if (!fs.existsSync(bin)) throw new Error(`actorllm binary not found at ${bin} (set ACTORLLM_BIN)`);
  return bin;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export class Server {
  /** @param {string[]} extra more `serve` flags */
  constructor(extra = []) {
    this.extra = extra;
    this.log = '';
    this.port = 0;
    this.exit = null;
  }

  get baseURL() {
    return `http://127.0.0.1:${this.port}`;
  }

  async start({ timeoutMs = 20000 } = {}) {
    const args = ['serve', modelDir, '--host', '127.0.0.1', '--port', '0', '--shutdown-timeout', '5', ...this.extra];
    const env = { ...process.env };
    env.ACTORLLM_NUM_THREADS ??= '2'; // a 260K-parameter model: more threads only contend with parallel ctest jobs
    this.proc = spawn(binaryPath(), args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
    this.exited = new Promise((resolve) => {
      this.proc.on('exit', (code, signal) => {
        this.exit = { code, signal };
        resolve(this.exit);
      });
    });
    this.proc.stderr.setEncoding('utf8');
    const marker = /Listening on http:\/\/127\.0\.0\.1:(\d+)\r?\n/;
    const listening = new Promise((resolve, reject) => {
      this.proc.stderr.on('data', (chunk) => {
        this.log += chunk;
        const m = marker.exec(this.log);
        if (m && !this.port) {
          this.port = Number(m[1]);
          resolve();
        }
      });
      this.proc.on('error', reject);
      this.exited.then((e) => reject(new Error(`server exited (${JSON.stringify(e)}) before listening; log:\n${this.log}`)));
    });
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`server did not listen within ${timeoutMs} ms; log:\n${this.log}`)), timeoutMs);
    });
    try {
      await Promise.race([listening, timeout]);
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        try {
          const r = await fetch(`${this.baseURL}/health`);
          await r.arrayBuffer();
          if (r.status === 200) break;
        } catch {
          // not accepting yet
        }
        if (Date.now() > deadline) throw new Error(`/health never answered 200; log:\n${this.log}`);
        await sleep(20);
      }
    } catch (e) {
      this.proc.kill('SIGKILL');
      throw e;
    } finally {
      clearTimeout(timer);
    }
    return this;
  }

  /** SIGTERM, then waits (bounded) for the exit; returns {code, signal}. SIGKILLs when it does not exit in time. */
  async stop({ timeoutMs = 10000 } = {}) {
    if (!this.proc) return null;
    if (this.exit) return this.exit;
    this.proc.kill('SIGTERM');
    let timer;
    const late = new Promise((resolve) => {
      timer = setTimeout(() => resolve(null), timeoutMs);
    });
    const e = await Promise.race([this.exited, late]);
    clearTimeout(timer);
    if (!e) {
      this.proc.kill('SIGKILL');
      await this.exited;
      return { code: null, signal: 'SIGKILL (did not exit within ' + timeoutMs + ' ms of SIGTERM)' };
    }
    return e;
  }
}
