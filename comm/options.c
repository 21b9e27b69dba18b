/* The public ways to describe a communicator before it exists: unique ids (made by one rank, handed to the
 * others out of band, as strings if need be) and the options, resolved against the environment. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/param.h"
#include "base/status.h"
#include "boot/bootstrap.h"
#include "comm/options.h"

void symmem_options_init(symmem_options_t *opts)
{
    if (!opts) return;
    symmem_options_t d = SYMMEM_OPTIONS_INIT;
    *opts = d;
}

/* ---- unique ids ------------------------------------------------------------------------------------- */

symmem_status_t symmem_get_unique_id(symmem_unique_id_t *id)
{
    symmem_clear_error();
    if (!id) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_get_unique_id: id is NULL");
    symmem_boot_id_t b;
    SYMMEM_CHECK(symmem_boot_id_make(&b));
    memcpy(id->bytes, &b, sizeof b);
    return SYMMEM_OK;
}

symmem_status_t symmem_unique_id_to_string(const symmem_unique_id_t *id, char *buf, size_t buflen)
{
    symmem_clear_error();
    if (!id || !buf || buflen < SYMMEM_UNIQUE_ID_STRLEN)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "symmem_unique_id_to_string: need an id and a buffer of SYMMEM_UNIQUE_ID_STRLEN "
                                "(%d) bytes",
                                SYMMEM_UNIQUE_ID_STRLEN);
    for (int i = 0; i < SYMMEM_UNIQUE_ID_BYTES; i++) snprintf(buf + 2 * i, 3, "%02x", id->bytes[i]);
    return SYMMEM_OK;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

symmem_status_t symmem_unique_id_from_string(const char *str, symmem_unique_id_t *id)
{
    symmem_clear_error();
    if (!str || !id) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_unique_id_from_string: NULL argument");
    if (strlen(str) != 2 * SYMMEM_UNIQUE_ID_BYTES)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "'%.40s%s' is not a symmem unique id: expected %d hex digits, got %zu characters", str,
                                strlen(str) > 40 ? "..." : "", 2 * SYMMEM_UNIQUE_ID_BYTES, strlen(str));
    symmem_unique_id_t t;
    for (int i = 0; i < SYMMEM_UNIQUE_ID_BYTES; i++) {
        int hi = hexval(str[2 * i]), lo = hexval(str[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "not a symmem unique id: non-hex character at %d",
                                    2 * i + (hi < 0 ? 0 : 1));
        t.bytes[i] = (unsigned char)(hi << 4 | lo);
    }
    symmem_boot_id_t b;
    memcpy(&b, t.bytes, sizeof b);
    SYMMEM_CHECK(symmem_boot_id_check(&b));
    *id = t;
    return SYMMEM_OK;
}

/* ---- options ---------------------------------------------------------------------------------------- */

/* The environment's backend and placement: values the table took (base/param.h refuses any other, with a
 * warning, and gives the default). */
static symmem_backend_t env_backend(void)
{
    return strcasecmp(symmem_param_str(SYMMEM_PARAM_BACKEND), "host") == 0 ? SYMMEM_BACKEND_HOST : SYMMEM_BACKEND_CUDA;
}

static symmem_placement_t env_placement(void)
{
    const char *s = symmem_param_str(SYMMEM_PARAM_PLACEMENT);
    if (strcasecmp(s, "device") == 0) return SYMMEM_PLACEMENT_DEVICE;
    if (strcasecmp(s, "host_numa") == 0 || strcasecmp(s, "host") == 0) return SYMMEM_PLACEMENT_HOST_NUMA;
    return SYMMEM_PLACEMENT_AUTO;
}

symmem_status_t symmem_comm_resolve_options(const symmem_options_t *o, symmem_comm_opts_t *r)
{
    symmem_options_t d = SYMMEM_OPTIONS_INIT;
    if (!o) o = &d;
    if (o->magic != SYMMEM_OPTIONS_MAGIC || o->size < offsetof(symmem_options_t, numa_node) + sizeof(int) ||
        o->version == 0 || o->version > SYMMEM_OPTIONS_VERSION)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "options not initialised: start from SYMMEM_OPTIONS_INIT or symmem_options_init()");
    r->device = o->device;
    /* SYMMEM_TIMEOUT_MS is 1..INT_MAX in the table: 4294967297 is refused there, never narrowed to 1 ms. */
    r->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : (int)symmem_param_int(SYMMEM_PARAM_TIMEOUT_MS);
    if (o->backend == SYMMEM_BACKEND_DEFAULT)
        r->backend = env_backend();
    else if (o->backend == SYMMEM_BACKEND_CUDA || o->backend == SYMMEM_BACKEND_HOST)
        r->backend = o->backend;
    else
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "unknown backend %d", (int)o->backend);
    if (o->placement == SYMMEM_PLACEMENT_DEFAULT)
        r->placement = env_placement();
    else if (o->placement >= SYMMEM_PLACEMENT_AUTO && o->placement <= SYMMEM_PLACEMENT_HOST_NUMA)
        r->placement = o->placement;
    else
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "unknown placement %d", (int)o->placement);
    r->numa_node = o->numa_node;
    return SYMMEM_OK;
}