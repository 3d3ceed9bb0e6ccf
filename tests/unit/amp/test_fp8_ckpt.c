/* F8_E4M3 / F8_E5M2 tensors through the checkpoint module (which handles dtypes by their safetensors names) and the
   CLI: accel_st_save writes them, accel_st_file_open lists them with their dtype and byte ranges,
   accel_st_file_load reads them back (a wrong destination dtype is refused), `accel ckpt ls` prints them, and a
   second parser (Python's json + a long-hand fp8 decode written in the script from the format definitions) reads
   the file and decodes every value to what accel_amp_fp8_to_f32 gives.
   usage: test_fp8_ckpt ACCEL_CLI PYTHON3 */
#include "accel.h"
#include "accel_amp.h"
#include "accel_safetensors.h"
#include "accel_test.h"
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static void quiet_log(void *user, accel_log_level level, const char *msg) { (void)user; (void)level; (void)msg; }

static const char *py =
    "import json, struct, sys\n"
    "def dec(b, e5):\n"
    "    s = -1.0 if b & 0x80 else 1.0\n"
    "    mb, bias = (2, 15) if e5 else (3, 7)\n"
    "    e, m = (b & 0x7f) >> mb, b & ((1 << mb) - 1)\n"
    "    if e5 and e == 31: return s * float('inf') if m == 0 else float('nan')\n"
    "    if not e5 and e == 15 and m == 7: return float('nan')\n"
    "    if e == 0: return s * m * 2.0 ** (1 - bias - mb)\n"
    "    return s * (1 + m / 2.0 ** mb) * 2.0 ** (e - bias)\n"
    "raw = open(sys.argv[1], 'rb').read()\n"
    "n = struct.unpack('<Q', raw[:8])[0]\n"
    "h = json.loads(raw[8:8 + n])\n"
    "for name in ('w_e4m3', 'g_e5m2'):\n"
    "    t = h[name]\n"
    "    a, b = t['data_offsets']\n"
    "    data = raw[8 + n + a: 8 + n + b]\n"
    "    print(name, t['dtype'], 'x'.join(map(str, t['shape'])), len(data))\n"
    "    print(' '.join(repr(dec(x, t['dtype'] == 'F8_E5M2')) for x in data))\n";

int main(int argc, char **argv) {
    accel acc;
    accel_desc d;
    char dir[] = "/tmp/accel_fp8_ckpt_XXXXXX", path[256], cmd[1024], line[65536];
    float src[48];
    uint8_t q4[48], q5[48], back[48];
    accel_tensor t[2], dst;
    accel_st_file *f = NULL;
    FILE *p;
    int i, seen = 0, bad = 0;
    if (argc < 3) { fprintf(stderr, "usage: test_fp8_ckpt ACCEL_CLI PYTHON3\n"); return 2; }
    memset(&d, 0, sizeof d);
    d.cpu = 1; d.no_mpi = 1; d.log_fn = quiet_log; d.mixed_precision = ACCEL_PRECISION_FP8;
    if (accel_init(&acc, &d) != ACCEL_OK) { fprintf(stderr, "%s\n", accel_last_error(&acc)); return 1; }
    AT_CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/fp8.safetensors", dir);
    for (i = 0; i < 48; ++i) src[i] = (float)(i - 24) * 0.37f * (i % 5 == 0 ? 100.0f : 1.0f);
    src[3] = NAN; src[7] = INFINITY; src[11] = 1e-3f;
    AT_EQ_INT(accel_amp_convert(&acc, src, ACCEL_F32, q4, ACCEL_F8_E4M3, 48, NULL), ACCEL_OK);
    AT_EQ_INT(accel_amp_convert(&acc, src, ACCEL_F32, q5, ACCEL_F8_E5M2, 48, NULL), ACCEL_OK);
    memset(t, 0, sizeof t);
    t[0].name = "w_e4m3"; t[0].ptr = q4; t[0].dtype = ACCEL_F8_E4M3; t[0].ndim = 2; t[0].shape[0] = 6; t[0].shape[1] = 8;
    t[1].name = "g_e5m2"; t[1].ptr = q5; t[1].dtype = ACCEL_F8_E5M2; t[1].ndim = 1; t[1].shape[0] = 48;
    AT_EQ_INT(accel_st_save(&acc, path, t, 2, NULL, 0), ACCEL_OK);
    /* the module's own reader */
    AT_EQ_INT(accel_st_file_open(&acc, path, &f), ACCEL_OK);
    if (f) {
        int k = accel_st_file_find(f, "w_e4m3"), k5 = accel_st_file_find(f, "g_e5m2");
        AT_EQ_INT(accel_st_file_count(f), 2);
        AT_CHECK(k >= 0 && k5 >= 0);
        if (k >= 0 && k5 >= 0) {
            const accel_st_entry *e = accel_st_file_entry(f, k), *e5 = accel_st_file_entry(f, k5);
            AT_EQ_INT(e->dtype, ACCEL_F8_E4M3);
            AT_EQ_INT(e5->dtype, ACCEL_F8_E5M2);
            AT_EQ_INT(e->end - e->begin, 48);
            AT_EQ_INT(e5->end - e5->begin, 48);
        }
        dst = t[0]; dst.ptr = back;
        memset(back, 0, sizeof back);
        AT_EQ_INT(accel_st_file_load(f, &dst), ACCEL_OK);
        AT_CHECK(memcmp(back, q4, 48) == 0);
        dst = t[1]; dst.ptr = back;
        AT_EQ_INT(accel_st_file_load(f, &dst), ACCEL_OK);
        AT_CHECK(memcmp(back, q5, 48) == 0);
        dst.dtype = ACCEL_F8_E4M3; /* E5M2 bytes into an E4M3 tensor: refused */
        AT_CHECK(accel_st_file_load(f, &dst) != ACCEL_OK);
        AT_CONTAINS(accel_last_error(&acc), "F8_E5M2");
        accel_st_file_destroy(f);
    }
    /* the CLI */
    snprintf(cmd, sizeof cmd, "'%s' ckpt ls '%s' 2>&1", argv[1], path);
    p = popen(cmd, "r");
    AT_CHECK(p != NULL);
    while (p && fgets(line, sizeof line, p)) {
        if (strstr(line, "w_e4m3") && strstr(line, "F8_E4M3") && strstr(line, "48 bytes")) seen |= 1;
        if (strstr(line, "g_e5m2") && strstr(line, "F8_E5M2") && strstr(line, "48 bytes")) seen |= 2;
    }
    if (p) AT_EQ_INT(pclose(p), 0);
    AT_EQ_INT(seen, 3);
    /* a second parser and decoder */
    {
        char script[] = "/tmp/accel_fp8_ckpt_py_XXXXXX";
        int fd = mkstemp(script);
        AT_CHECK(fd >= 0);
        if (fd >= 0) {
            AT_EQ_INT(write(fd, py, strlen(py)), (long long)strlen(py));
            close(fd);
            snprintf(cmd, sizeof cmd, "'%s' '%s' '%s'", argv[2], script, path);
            p = popen(cmd, "r");
            seen = 0;
            while (p && fgets(line, sizeof line, p)) {
                char name[32], dt[16], shape[32];
                long bytes;
                int e5;
                const uint8_t *q;
                char *tok, *save = NULL;
                if (sscanf(line, "%31s %15s %31s %ld", name, dt, shape, &bytes) != 4) { bad++; break; }
                e5 = !strcmp(name, "g_e5m2");
                q = e5 ? q5 : q4;
                AT_EQ_STR(dt, e5 ? "F8_E5M2" : "F8_E4M3");
                AT_EQ_STR(shape, e5 ? "48" : "6x8");
                AT_EQ_INT(bytes, 48);
                if (!fgets(line, sizeof line, p)) { bad++; break; }
                for (i = 0, tok = strtok_r(line, " \n", &save); tok && i < 48; tok = strtok_r(NULL, " \n", &save), ++i) {
                    double v = !strcmp(tok, "nan") ? NAN : !strcmp(tok, "inf") ? INFINITY : !strcmp(tok, "-inf") ? -INFINITY : atof(tok);
                    float a = accel_amp_fp8_to_f32(q[i], e5);
                    if (isnan(v) ? !isnan(a) : (double)a != v) bad++;
                }
                AT_EQ_INT(i, 48);
                seen++;
            }
            if (p) pclose(p);
            AT_EQ_INT(seen, 2);
            AT_EQ_INT(bad, 0);
            unlink(script);
        }
    }
    unlink(path);
    rmdir(dir);
    accel_shutdown(&acc);
    return at_finish("amp_fp8_ckpt");
}
