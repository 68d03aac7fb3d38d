/* Decode one rectangle of a JPEG at 1/1, 1/2, 1/4 or 1/8 scale with libjpeg-turbo.
 *
 * Rows above the rectangle are skipped (jpeg_skip_scanlines: entropy-decoded, not transformed),
 * rows below it are never read, and only the iMCU columns that hold it go through the inverse
 * DCT, upsampling and colour conversion (jpeg_crop_scanline). For a random resized crop this is
 * about half of the work of a full decode.
 *
 * decode_region(data, scale, top, left, height, width, order[, stored]) -> (pixels, rows, band, channels, offset) | None
 *   top/left/height/width are in the scaled image (libjpeg's ceil(size / scale));
 *   order: 0 RGB, 1 BGR, 2 gray;
 *   pixels: a bytearray of rows x band x channels in that order; the rectangle's first column is
 *   at `offset` inside the band (the band starts on an iMCU boundary).
 *   None: the image is not one this decoder handles the way the full decoders do (CMYK/YCCK, an
 *   EXIF orientation other than 1): decode it the ordinary way.
 *   stored: 1 decodes the pixels as stored whatever the EXIF orientation says (no None for it): the
 *   rectangle is then one of the stored image, and the caller turns it upright.
 *   ValueError: libjpeg's message (corrupt data).
 *
 * resize_planes(array, out_h, out_w, flip[, simd]) -> bytearray: a crop's bilinear resize straight into
 *   CHW planes (see below), for the pipelines' crops shrunk under 2x or enlarged, where the CPU has
 *   AVX2 (RESIZE_SIMD).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>
#include <math.h>
#include <stdint.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define RS_X86 1
#endif

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
    char warning[JMSG_LENGTH_MAX]; /* the first warning of damaged data libjpeg decodes around, "" for none */
    int damaged;                   /* entropy-coded data missing or wrong where decoding went (not a version or
                                    * stray bytes before a marker, whose pixels are the image's) */
} error_mgr;

/* DamagedJPEG: decode_region met corrupt data inside what it decoded (libjpeg filled it in, gray) */
static PyObject *Damaged = NULL;

static void on_error(j_common_ptr cinfo) {
    error_mgr *err = (error_mgr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->message);
    longjmp(err->jump, 1);
}

/* warnings are not printed, as with torchvision's decoder */
static void on_message(j_common_ptr cinfo) { (void)cinfo; }

/* libjpeg's emit_message, counting warnings as it does, and noting those that mean the pixels decoded are its
 * filling-in (the data cut short with its end marker put back, bad Huffman codes, a lost restart): region_core
 * refuses those pixels. A JFIF or Adobe version it does not know, or stray bytes before a marker (cameras write
 * them), leave the pixels the image's. */
static void on_emit(j_common_ptr cinfo, int msg_level) {
    error_mgr *err = (error_mgr *)cinfo->err;
    if (msg_level >= 0)
        return; /* trace messages */
    if (cinfo->err->msg_code == JWRN_HIT_MARKER || cinfo->err->msg_code == JWRN_HUFF_BAD_CODE ||
        cinfo->err->msg_code == JWRN_MUST_RESYNC || cinfo->err->msg_code == JWRN_JPEG_EOF
#if JPEG_LIB_VERSION >= 70 || defined(C_ARITH_CODING_SUPPORTED) || defined(D_ARITH_CODING_SUPPORTED)
        || cinfo->err->msg_code == JWRN_ARITH_BAD_CODE /* an arithmetic-coded scan's own damage */
#endif
    ) {
        if (!err->damaged)
            (*cinfo->err->format_message)(cinfo, err->warning);
        err->damaged = 1;
    }
    cinfo->err->num_warnings++;
}

static struct jpeg_error_mgr *init_errors(error_mgr *err) {
    struct jpeg_error_mgr *pub = jpeg_std_error(&err->pub);
    pub->error_exit = on_error;
    pub->output_message = on_message;
    pub->emit_message = on_emit;
    err->message[0] = '\0';
    err->warning[0] = '\0';
    err->damaged = 0;
    return pub;
}

static unsigned read16(const JOCTET *p, int little) { return little ? p[0] | (p[1] << 8) : (p[0] << 8) | p[1]; }

static unsigned long read32(const JOCTET *p, int little) {
    return little ? (unsigned long)p[0] | ((unsigned long)p[1] << 8) | ((unsigned long)p[2] << 16) |
                        ((unsigned long)p[3] << 24)
                  : ((unsigned long)p[0] << 24) | ((unsigned long)p[1] << 16) | ((unsigned long)p[2] << 8) |
                        (unsigned long)p[3];
}

/* 1 when no EXIF segment asks for a rotation, else 0: every APP1 that starts with "Exif" (whatever
 * its two padding bytes) is read, and one that cannot be read counts as a rotation, since the
 * whole-image decoders may read it differently; such images are left to them. */
static int exif_upright(j_decompress_ptr cinfo) {
    jpeg_saved_marker_ptr m;
    for (m = cinfo->marker_list; m != NULL; m = m->next) {
        const JOCTET *d = m->data;
        unsigned long n = m->data_length, ifd;
        unsigned count, k;
        int little;
        if (m->marker != JPEG_APP0 + 1 || n < 4 || memcmp(d, "Exif", 4) != 0)
            continue;
        if (n < 14)
            return 0;
        d += 6;
        n -= 6;
        if (d[0] == 'I' && d[1] == 'I')
            little = 1;
        else if (d[0] == 'M' && d[1] == 'M')
            little = 0;
        else
            return 0;
        ifd = read32(d + 4, little);
        if (ifd > n || n - ifd < 2)
            return 0;
        count = read16(d + ifd, little);
        for (k = 0; k < count; k++) {
            unsigned long e = ifd + 2 + 12UL * k;
            if (e > n || n - e < 12)
                return 0;
            if (read16(d + e, little) == 0x0112 && read16(d + e + 8, little) != 1)
                return 0;
        }
    }
    return 1;
}

/* 1 for the sampling factors cameras and encoders write (a luma MCU of up to 4 blocks: 4:4:4, 4:2:2, 4:2:0, 4:4:0,
 * 4:1:1); 0 for larger ones (cjpeg -sample 4x2 or 2x4), whose column crops libjpeg-turbo decodes with other pixels
 * than the whole image's at reduced scales: such files go to the whole-image decoders. */
static int usual_sampling(j_decompress_ptr cinfo) {
    return cinfo->max_h_samp_factor * cinfo->max_v_samp_factor <= 4;
}

/* 1 when every component of the scan names Huffman tables 0-3 that are defined; libjpeg checks the numbers only when
 * decoding starts, not when it reads the scan's header (a damaged byte there named table 14) */
static int tables_defined(j_decompress_ptr cinfo) {
    int i;
    for (i = 0; i < cinfo->comps_in_scan; i++) {
        jpeg_component_info *c = cinfo->cur_comp_info[i];
        if (c == NULL || c->dc_tbl_no < 0 || c->dc_tbl_no >= NUM_HUFF_TBLS || c->ac_tbl_no < 0 ||
            c->ac_tbl_no >= NUM_HUFF_TBLS || cinfo->dc_huff_tbl_ptrs[c->dc_tbl_no] == NULL ||
            cinfo->ac_huff_tbl_ptrs[c->ac_tbl_no] == NULL)
            return 0;
    }
    return 1;
}

static void release(Py_buffer *owner) {
    if (owner != NULL)
        PyBuffer_Release(owner);
}

static int check_args(int scale, unsigned long height, unsigned long width, int order) {
    if ((scale != 1 && scale != 2 && scale != 4 && scale != 8) || height == 0 || width == 0 || order < 0 ||
        order > 2) {
        PyErr_SetString(PyExc_ValueError, "scale must be 1, 2, 4 or 8, order 0, 1 or 2, and the rectangle not empty");
        return 0;
    }
    return 1;
}

/* The rectangle of buf[0:len] (decode_region's arguments); owner: released (PyBuffer_Release) on
 * every return when not NULL. */
static PyObject *region_core(const unsigned char *buf, size_t len, Py_buffer *owner, int scale, unsigned long top,
                             unsigned long left, unsigned long height, unsigned long width, int order,
                             unsigned long min_left, int stored) {
    struct jpeg_decompress_struct cinfo;
    error_mgr err;
    PyObject *volatile out = NULL;
    volatile int created = 0;
    PyThreadState *volatile released = NULL;
    JDIMENSION xoff, band;
    volatile JDIMENSION rows_done = 0;
    int channels;
    unsigned long margin_x, margin_y, ext_top, ext_left, ext_right, skip_rows;
    JSAMPLE *volatile scratch = NULL;

    cinfo.err = init_errors(&err);
    if (setjmp(err.jump)) {
        if (released != NULL)
            PyEval_RestoreThread(released);
        PyMem_Free(scratch);
        if (created)
            jpeg_destroy_decompress(&cinfo);
        Py_XDECREF(out);
        release(owner);
        PyErr_SetString(PyExc_ValueError, err.message);
        return NULL;
    }
    jpeg_create_decompress(&cinfo);
    created = 1;
    jpeg_mem_src(&cinfo, buf, (unsigned long)len);
    if (!stored)
        jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&cinfo, TRUE);
    if ((!stored && !exif_upright(&cinfo)) || cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK ||
        (cinfo.num_components != 1 && cinfo.num_components != 3) || !usual_sampling(&cinfo)) {
        jpeg_destroy_decompress(&cinfo);
        release(owner);
        Py_RETURN_NONE;
    }
    cinfo.out_color_space = order == 2 ? JCS_GRAYSCALE : order == 1 ? JCS_EXT_BGR : JCS_RGB;
    cinfo.scale_num = 1;
    cinfo.scale_denom = (unsigned)scale;
    jpeg_start_decompress(&cinfo);
    /* A progressive file whose scans leave coefficients unrefined (fewer scans than a full set, or cut short
     * with its end marker kept) is decoded with block smoothing, which reads the blocks two rows and a column
     * around each: past this decoder's margins, a band's pixels would differ from the whole image's by a few
     * levels. Such files go to the whole-image decoders (None); complete ones (every coefficient's last bit
     * read: coef_bits all 0) are decoded without smoothing by every decoder alike. */
    if (cinfo.progressive_mode && cinfo.do_block_smoothing && cinfo.coef_bits != NULL) {
        int ci, k;
        for (ci = 0; ci < cinfo.num_components; ci++)
            for (k = 0; k < DCTSIZE2; k++)
                if (cinfo.coef_bits[ci][k] != 0) {
                    int damaged = err.damaged; /* its scans are read by now: one cut short is damage, not a choice */
                    jpeg_destroy_decompress(&cinfo);
                    release(owner);
                    if (damaged) {
                        PyErr_SetString(Damaged, err.warning[0] ? err.warning : "corrupt JPEG data");
                        return NULL;
                    }
                    Py_RETURN_NONE;
                }
    }
    /* compared without sums, which could wrap */
    if (top >= cinfo.output_height || height > cinfo.output_height - top || left >= cinfo.output_width ||
        width > cinfo.output_width - left) {
        char msg[200];
        snprintf(msg, sizeof msg, "rectangle %lux%lu at (%lu, %lu) outside the %ux%u image at 1/%d", height, width,
                 top, left, cinfo.output_height, cinfo.output_width, scale);
        jpeg_destroy_decompress(&cinfo);
        release(owner);
        PyErr_SetString(PyExc_ValueError, msg);
        return NULL;
    }
    /* Upsampling reads the chroma samples beside a pixel; at the edge of a decoded band libjpeg
     * repeats the edge instead. So the band reaches one iMCU past the rectangle on the left and
     * right, and decoding starts one iMCU row above it (rows below are read as context anyway):
     * the rectangle's pixels are then those of the whole image. */
#if JPEG_LIB_VERSION >= 70 /* the libjpeg 7/8 API (Ubuntu's libjpeg-turbo8-dev): a scaled size per direction */
    margin_x = (unsigned long)cinfo.max_h_samp_factor * (unsigned long)cinfo.min_DCT_h_scaled_size;
    margin_y = (unsigned long)cinfo.max_v_samp_factor * (unsigned long)cinfo.min_DCT_v_scaled_size;
#else
    margin_x = (unsigned long)cinfo.max_h_samp_factor * (unsigned long)cinfo.min_DCT_scaled_size;
    margin_y = (unsigned long)cinfo.max_v_samp_factor * (unsigned long)cinfo.min_DCT_scaled_size;
#endif
    ext_left = left > margin_x ? left - margin_x : 0;
    if (ext_left < min_left) /* a band edge there, as at the image's edge */
        ext_left = min_left;
    ext_right = cinfo.output_width - (left + width) > margin_x ? left + width + margin_x : cinfo.output_width;
    ext_top = top > margin_y ? top - margin_y : 0;
    xoff = (JDIMENSION)ext_left;
    band = (JDIMENSION)(ext_right - ext_left);
    if (xoff != 0 || band != cinfo.output_width)
        jpeg_crop_scanline(&cinfo, &xoff, &band);
    channels = cinfo.output_components;
    skip_rows = top - ext_top;
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)height * band * channels);
    if (out != NULL && skip_rows > 0) {
        scratch = PyMem_Malloc((size_t)band * channels);
        if (scratch == NULL) {
            Py_CLEAR(out);
            PyErr_NoMemory();
        }
    }
    if (out == NULL) {
        jpeg_destroy_decompress(&cinfo);
        release(owner);
        return NULL;
    }
    {
        JSAMPLE *base = (JSAMPLE *)PyByteArray_AS_STRING(out);
        size_t stride = (size_t)band * channels;
        JDIMENSION got = 1;
        unsigned long context = 0;
        released = PyEval_SaveThread(); /* libjpeg's errors longjmp back above, which takes the GIL again */
        if (ext_top > 0)
            jpeg_skip_scanlines(&cinfo, (JDIMENSION)ext_top);
        while (context < skip_rows && got > 0) {
            JSAMPROW row = scratch;
            got = jpeg_read_scanlines(&cinfo, &row, 1);
            context += got;
        }
        while (rows_done < height && got > 0) {
            JSAMPROW row = base + stride * rows_done;
            got = jpeg_read_scanlines(&cinfo, &row, 1);
            rows_done += got;
        }
        PyEval_RestoreThread(released);
        released = NULL;
    }
    PyMem_Free(scratch);
    scratch = NULL;
    if (rows_done < height) {
        jpeg_destroy_decompress(&cinfo);
        Py_DECREF(out);
        release(owner);
        PyErr_SetString(PyExc_ValueError, "the decoder stopped before the rectangle's last row");
        return NULL;
    }
    if (err.damaged) { /* a cut-short scan (its end marker put back), bad Huffman codes: the rectangle's
                        * pixels are libjpeg's filling-in, not the image's */
        jpeg_destroy_decompress(&cinfo);
        Py_DECREF(out);
        release(owner);
        PyErr_SetString(Damaged, err.warning[0] ? err.warning : "corrupt JPEG data");
        return NULL;
    }
    jpeg_abort_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    release(owner);
    return Py_BuildValue("(NIIiI)", out, (unsigned)height, (unsigned)band, channels, (unsigned)(left - xoff));
}

static PyObject *decode_region(PyObject *self, PyObject *args) {
    Py_buffer view;
    int scale, order;
    unsigned long top, left, height, width;
    int stored = 0;
    (void)self;

    if (!PyArg_ParseTuple(args, "y*ikkkki|p", &view, &scale, &top, &left, &height, &width, &order, &stored))
        return NULL;
    if (!check_args(scale, height, width, order)) {
        PyBuffer_Release(&view);
        return NULL;
    }
    return region_core((const unsigned char *)view.buf, (size_t)view.len, &view, scale, top, left, height, width,
                       order, 0, stored);
}

/* ---- Entropy index: decoding a crop without reading the entropy-coded data around it ----------
 *
 * A baseline JPEG's entropy-coded data is one bit stream: to decode an MCU, libjpeg reads every bit
 * before it. jpeg_index() reads the scan once (Huffman symbols only, scan_points) and records, at every
 * g-th MCU of every MCU row, where its bits start (byte offset of the scan data and bit phase) and
 * the DC predictors there. With that, decode_indexed() builds a smaller JPEG holding only the MCU
 * rows and columns around a rectangle: each of its rows starts after a restart marker (DC
 * predictors 0, byte aligned), with one made-up MCU whose DC values set the predictors to those
 * recorded and whose length puts the next bit at the recorded phase, followed by the original
 * bytes of the row's MCUs, copied as they are. The rectangle is then decoded from that JPEG as
 * decode_region does; it lies one MCU inside the copied ones on every side, so upsampling sees the
 * same neighbours, and its pixels are those of the whole image.
 *
 * jpeg_index(data) -> bytes | None   (None: progressive, arithmetic, restart intervals, 12-bit,
 *                                     several scans, corrupt data or any doubt: not indexed)
 * decode_indexed(data, index, scale, top, left, height, width, order[, stored]) -> as decode_region | None
 */

#define INDEX_MAGIC "DKJ1"
#define INDEX_HEAD 48
#define INDEX_POINT 12

typedef struct {
    unsigned short code[256];
    unsigned char len[256]; /* 0: not in the table */
} hcodes;

static int make_codes(const JHUFF_TBL *t, hcodes *h) {
    unsigned code = 0;
    int k = 0, l, i;
    memset(h, 0, sizeof *h);
    if (t == NULL)
        return 0;
    for (l = 1; l <= 16; l++) {
        for (i = 0; i < t->bits[l]; i++) {
            if (k >= 256 || h->len[t->huffval[k]] != 0)
                return 0;
            h->code[t->huffval[k]] = (unsigned short)code;
            h->len[t->huffval[k]] = (unsigned char)l;
            k++;
            code++;
        }
        code <<= 1;
    }
    return 1;
}

static int nbits(int v) {
    if (v < 0)
        v = -v;
    return v ? 32 - __builtin_clz((unsigned)v) : 0;
}

static void put32(unsigned char *p, unsigned long v) {
    p[0] = v & 0xFF;
    p[1] = (v >> 8) & 0xFF;
    p[2] = (v >> 16) & 0xFF;
    p[3] = (v >> 24) & 0xFF;
}
static unsigned long get32(const unsigned char *p) {
    return (unsigned long)p[0] | ((unsigned long)p[1] << 8) | ((unsigned long)p[2] << 16) | ((unsigned long)p[3] << 24);
}
static void put16(unsigned char *p, unsigned v) {
    p[0] = v & 0xFF;
    p[1] = (v >> 8) & 0xFF;
}
static unsigned get16(const unsigned char *p) { return p[0] | (p[1] << 8); }

/* The layout jpeg_index and decode_indexed agree on, from a header read up to the scan. */
typedef struct {
    int ncomp, order[MAX_COMPS_IN_SCAN]; /* components in scan order (index into comp_info) */
    int mcu_blocks[MAX_COMPS_IN_SCAN]; /* blocks of each component in an MCU */
    unsigned mcus_x, mcus_y, mcu_w, mcu_h;
    hcodes dc[MAX_COMPS_IN_SCAN], ac[MAX_COMPS_IN_SCAN];
} layout;

static int read_layout(j_decompress_ptr cinfo, layout *lay) {
    int i;
    if (cinfo->progressive_mode || cinfo->arith_code || cinfo->data_precision != 8 || cinfo->restart_interval != 0 ||
        cinfo->comps_in_scan != cinfo->num_components || (cinfo->num_components != 1 && cinfo->num_components != 3) ||
        !usual_sampling(cinfo) || !tables_defined(cinfo))
        return 0;
    lay->ncomp = cinfo->comps_in_scan;
    for (i = 0; i < lay->ncomp; i++) {
        jpeg_component_info *c = cinfo->cur_comp_info[i];
        lay->order[i] = c->component_index;
        lay->mcu_blocks[i] = cinfo->comps_in_scan == 1 ? 1 : c->h_samp_factor * c->v_samp_factor;
        if (!make_codes(cinfo->dc_huff_tbl_ptrs[c->dc_tbl_no], &lay->dc[i]) ||
            !make_codes(cinfo->ac_huff_tbl_ptrs[c->ac_tbl_no], &lay->ac[i]) || lay->ac[i].len[0] == 0)
            return 0;
    }
    if (lay->ncomp == 1) { /* not interleaved: one block an MCU */
        jpeg_component_info *c = cinfo->cur_comp_info[0];
        if (c->h_samp_factor != cinfo->max_h_samp_factor || c->v_samp_factor != cinfo->max_v_samp_factor)
            return 0;
        lay->mcu_w = lay->mcu_h = 8;
    } else {
        lay->mcu_w = 8 * cinfo->max_h_samp_factor;
        lay->mcu_h = 8 * cinfo->max_v_samp_factor;
    }
    lay->mcus_x = (cinfo->image_width + lay->mcu_w - 1) / lay->mcu_w;
    lay->mcus_y = (cinfo->image_height + lay->mcu_h - 1) / lay->mcu_h;
    return lay->mcus_x < 65536 && lay->mcus_y < 65536;
}

/* The index's spacing: at most 17 points a row, and no closer than 4 MCUs. */
static unsigned spacing(unsigned mcus_x) { return mcus_x / 16 > 4 ? mcus_x / 16 : 4; }

/* Reading the entropy-coded data without decoding it: Huffman symbols and the lengths of their
 * extra bits, nothing else. It gives the index its bit positions and DC predictors at a fraction
 * of the cost of jpeg_read_coefficients, which also stores every coefficient of the image. */
#define LOOK 9

typedef struct {
    unsigned short look[1 << LOOK]; /* (length << 8) | symbol for codes of up to LOOK bits; 0: longer */
    long maxcode[18];               /* the largest code of each length, -1: none */
    int valoff[17];                 /* huffval index of a code of that length, less the code */
    unsigned char huffval[256];
} htab;

static int make_htab(const JHUFF_TBL *t, htab *h) {
    long code = 0;
    int k = 0, l, i;
    memset(h->look, 0, sizeof h->look);
    if (t == NULL)
        return 0;
    for (l = 1; l <= 16; l++) {
        h->valoff[l] = k - (int)code;
        for (i = 0; i < t->bits[l]; i++) {
            if (k >= 256)
                return 0;
            h->huffval[k] = t->huffval[k];
            if (l <= LOOK) {
                int fill = 1 << (LOOK - l), f;
                for (f = 0; f < fill; f++)
                    h->look[(code << (LOOK - l)) | f] = (unsigned short)((l << 8) | t->huffval[k]);
            }
            k++;
            code++;
        }
        h->maxcode[l] = t->bits[l] ? code - 1 : -1;
        if (code > (1L << l)) /* more codes than the length allows */
            return 0;
        code <<= 1;
    }
    h->maxcode[17] = 0x7FFFFFFFL; /* no code longer than 16 bits: a sentinel */
    return 1;
}

typedef struct {
    const unsigned char *p, *end;
    unsigned long long acc; /* the next bits, most significant first */
    int n;                  /* how many of acc's bits are data */
    int marker;             /* a marker (or the data's end) was reached: zeros follow */
    unsigned long long avail, used; /* bits of entropy-coded data loaded, and used */
} bitr;

static void fill(bitr *r) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (!r->marker && r->end - r->p >= 9) { /* no 0xFF among the next 8 bytes: take them at once */
        unsigned long long x;
        memcpy(&x, r->p, 8);
        x = ~x;
        if (!((x - 0x0101010101010101ULL) & ~x & 0x8080808080808080ULL)) {
            int nb = (64 - r->n) >> 3, rest = 64 - r->n - 8 * nb;
            x = __builtin_bswap64(~x) >> r->n;
            r->acc |= x & ~((1ULL << rest) - 1);
            r->n += 8 * nb;
            r->p += nb;
            r->avail += 8 * (unsigned)nb;
            return;
        }
    }
#endif
    while (r->n <= 56) {
        unsigned b = 0;
        if (!r->marker) {
            if (r->p + 1 >= r->end)
                r->marker = 1;
            else if (r->p[0] != 0xFF) {
                b = *r->p++;
                r->avail += 8;
            } else if (r->p[1] == 0x00) {
                b = 0xFF;
                r->p += 2;
                r->avail += 8;
            } else
                r->marker = 1;
        }
        r->acc |= (unsigned long long)b << (56 - r->n);
        r->n += 8;
    }
}

static inline void skip(bitr *r, int l) {
    r->acc <<= l;
    r->n -= l;
    r->used += (unsigned)l;
}

/* one Huffman symbol; -1: no such code. At least 16 bits must be in acc. */
static inline int symbol(bitr *r, const htab *t) {
    unsigned e = t->look[r->acc >> (64 - LOOK)];
    int l;
    if (e) {
        skip(r, (int)(e >> 8));
        return (int)(e & 0xFF);
    }
    for (l = LOOK + 1; l <= 16; l++) {
        long code = (long)(r->acc >> (64 - l));
        if (code <= t->maxcode[l]) {
            skip(r, l);
            return t->huffval[t->valoff[l] + code];
        }
    }
    return -1;
}

/* Walk the scan: at every g-th MCU of every row, the bit position and the DC predictors. */
static int scan_points(const unsigned char *data, size_t len, size_t scan_start, j_decompress_ptr cinfo,
                       const layout *lay, unsigned g, unsigned long long *bitpos, unsigned char *points,
                       size_t *count) {
    htab dc[MAX_COMPS_IN_SCAN], ac[MAX_COMPS_IN_SCAN];
    int blocks[MAX_COMPS_IN_SCAN], pred[MAX_COMPS_IN_SCAN] = {0};
    bitr r = {data + scan_start, data + len, 0, 0, 0, 0, 0};
    unsigned mx, my;
    size_t p = 0;
    int ci;
    if (!tables_defined(cinfo))
        return 0;
    for (ci = 0; ci < lay->ncomp; ci++) {
        jpeg_component_info *c = cinfo->cur_comp_info[ci];
        if (!make_htab(cinfo->dc_huff_tbl_ptrs[c->dc_tbl_no], &dc[ci]) ||
            !make_htab(cinfo->ac_huff_tbl_ptrs[c->ac_tbl_no], &ac[ci]))
            return 0;
        blocks[ci] = lay->mcu_blocks[ci];
    }
    for (my = 0; my < lay->mcus_y; my++)
        for (mx = 0; mx < lay->mcus_x; mx++) {
            if (mx % g == 0) {
                unsigned char *pt = points + INDEX_POINT * p;
                memset(pt, 0, INDEX_POINT);
                for (ci = 0; ci < lay->ncomp; ci++)
                    put16(pt + 6 + 2 * ci, (unsigned)(pred[ci] & 0xFFFF));
                bitpos[p++] = r.used;
            }
            for (ci = 0; ci < lay->ncomp; ci++) {
                const htab *d = &dc[ci], *a = &ac[ci];
                int b;
                for (b = 0; b < blocks[ci]; b++) {
                    int s, k;
                    if (r.n < 32)
                        fill(&r);
                    s = symbol(&r, d);
                    if (s < 0 || s > 11)
                        return 0;
                    if (s) {
                        int v = (int)(r.acc >> (64 - s));
                        if (v < (1 << (s - 1)))
                            v -= (1 << s) - 1;
                        skip(&r, s);
                        pred[ci] += v;
                    }
                    for (k = 1; k < 64;) {
                        int rs, run;
                        if (r.n < 32)
                            fill(&r);
                        rs = symbol(&r, a);
                        if (rs < 0)
                            return 0;
                        run = rs >> 4;
                        s = rs & 15;
                        if (s) {
                            if (s > 10 || k + run > 63)
                                return 0;
                            k += run + 1;
                            skip(&r, s);
                        } else if (run == 15) {
                            if (k + 16 > 63)
                                return 0;
                            k += 16;
                        } else if (run == 0)
                            break;
                        else
                            return 0; /* EOBn: only in progressive scans */
                    }
                }
            }
            if (r.used > r.avail)
                return 0; /* past the data's end */
        }
    {
        unsigned char *pt = points + INDEX_POINT * p;
        memset(pt, 0, INDEX_POINT);
        bitpos[p++] = r.used;
    }
    *count = p;
    return 1;
}

static PyObject *jpeg_index(PyObject *self, PyObject *args) {
    Py_buffer view;
    struct jpeg_decompress_struct cinfo;
    error_mgr err;
    volatile int created = 0;
    PyThreadState *volatile released = NULL;
    layout lay;
    unsigned char *volatile out = NULL;
    unsigned long long *volatile bitpos = NULL;
    size_t scan_start, npoints = 0;
    volatile size_t outlen = 0;
    unsigned g, per_row;
    volatile int ok = 0;
    PyObject *result;
    (void)self;

    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    cinfo.err = init_errors(&err);
    if (setjmp(err.jump)) {
        if (released != NULL)
            PyEval_RestoreThread(released);
        PyMem_RawFree(out);
        PyMem_RawFree(bitpos);
        if (created)
            jpeg_destroy_decompress(&cinfo);
        PyBuffer_Release(&view);
        Py_RETURN_NONE; /* libjpeg refuses it: the ordinary decoders say why */
    }
    jpeg_create_decompress(&cinfo);
    created = 1;
    jpeg_mem_src(&cinfo, (const unsigned char *)view.buf, (unsigned long)view.len);
    released = PyEval_SaveThread();
    jpeg_read_header(&cinfo, TRUE);
    scan_start = (size_t)(cinfo.src->next_input_byte - (const JOCTET *)view.buf);
    /* under 4 MCUs a side there is little to skip, and libjpeg-turbo upsamples bands that narrow
     * differently from a whole row */
    if (read_layout(&cinfo, &lay) && lay.mcus_x >= 4 && lay.mcus_y >= 4) {
        const unsigned char *data = (const unsigned char *)view.buf;
        size_t len = (size_t)view.len;
        int fail = cinfo.err->num_warnings != 0;
        size_t p = 0;
        g = spacing(lay.mcus_x);
        per_row = (lay.mcus_x + g - 1) / g;
        npoints = (size_t)per_row * lay.mcus_y + 1;
        outlen = INDEX_HEAD + INDEX_POINT * npoints;
        out = PyMem_RawMalloc(outlen);
        bitpos = PyMem_RawMalloc(sizeof(unsigned long long) * npoints);
        if (out == NULL || bitpos == NULL ||
            !scan_points(data, len, scan_start, &cinfo, &lay, g, bitpos, out + INDEX_HEAD, &p))
            fail = 1;
        if (!fail) {
            /* bit positions to offsets in the stuffed data; the scan must end at a marker there */
            {
                size_t pos = scan_start, q;
                unsigned long long d = 0;
                for (q = 0; q < p && !fail; q++) {
                    unsigned long long want = bitpos[q] >> 3;
                    while (d < want && !fail) {
                        if (pos + 1 >= len)
                            fail = 1;
                        else if (data[pos] == 0xFF) {
                            if (data[pos + 1] != 0x00)
                                fail = 1;
                            pos += 2;
                        } else
                            pos++;
                        d++;
                    }
                    if (pos > 0xFFFFFFFFUL)
                        fail = 1;
                    put32(out + INDEX_HEAD + INDEX_POINT * q, (unsigned long)pos);
                    out[INDEX_HEAD + INDEX_POINT * q + 4] = (unsigned char)(bitpos[q] & 7);
                }
                if (!fail && (bitpos[p - 1] & 7)) { /* the last, partial byte */
                    if (pos + 1 >= len || (data[pos] == 0xFF && data[pos + 1] != 0x00))
                        fail = 1;
                    else
                        pos += data[pos] == 0xFF ? 2 : 1;
                }
                if (!fail && !(pos + 1 < len && data[pos] == 0xFF && data[pos + 1] != 0x00))
                    fail = 1;
            }
        }
        if (!fail && cinfo.err->num_warnings == 0 && len <= 0xFFFFFFFFUL && len >= scan_start + 8) {
            memcpy(out, INDEX_MAGIC, 4);
            put32(out + 4, (unsigned long)len);
            put32(out + 8, (unsigned long)scan_start);
            put16(out + 12, lay.mcus_x);
            put16(out + 14, lay.mcus_y);
            put16(out + 16, g);
            put16(out + 18, per_row);
            out[20] = (unsigned char)lay.ncomp;
            out[21] = (unsigned char)lay.mcu_w;
            out[22] = (unsigned char)lay.mcu_h;
            out[23] = 0;
            memcpy(out + 24, data + scan_start, 8); /* a fingerprint: the scan's first and the file's last bytes */
            memcpy(out + 32, data + len - 8, 8);
            memset(out + 40, 0, INDEX_HEAD - 40);
            ok = 1;
        }
    }
    PyEval_RestoreThread(released);
    released = NULL;
    jpeg_abort_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    PyBuffer_Release(&view);
    PyMem_RawFree(bitpos);
    if (!ok) {
        PyMem_RawFree(out);
        Py_RETURN_NONE;
    }
    result = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)outlen);
    PyMem_RawFree(out);
    return result;
}

/* A bit writer with JPEG's byte stuffing. */
typedef struct {
    unsigned char *p;
    unsigned acc;
    int n; /* bits pending in acc, fewer than 8 */
} bitw;

static void emit(bitw *w, unsigned b) {
    *w->p++ = (unsigned char)b;
    if (b == 0xFF)
        *w->p++ = 0;
}

static void put_bits(bitw *w, unsigned v, int len) {
    while (len > 0) {
        int take = len < 8 - w->n ? len : 8 - w->n;
        w->acc = (w->acc << take) | ((v >> (len - take)) & ((1u << take) - 1));
        w->n += take;
        len -= take;
        if (w->n == 8) {
            emit(w, w->acc & 0xFF);
            w->acc = 0;
            w->n = 0;
        }
    }
}

static void pad_bits(bitw *w) {
    if (w->n > 0)
        put_bits(w, 0xFF, 8 - w->n);
}

/* Extra AC symbols (run << 4 | size, positive values) whose bits, added to a block, make any
 * length modulo 8: plan[e] lists them for e extra bits mod 8; 0 when not reachable. */
typedef struct {
    int count[8];
    unsigned char sym[8][8];
} tuning;

static int make_tuning(const hcodes *ac, tuning *t) {
    int e, step, changed = 1, pos[8];
    for (e = 0; e < 8; e++)
        t->count[e] = -1;
    t->count[0] = 0;
    pos[0] = 0;
    for (step = 0; step < 8 && changed; step++) {
        int from;
        changed = 0;
        for (from = 0; from < 8; from++) {
            int sym;
            if (t->count[from] != step)
                continue;
            for (sym = 1; sym < 256; sym++) {
                int r = sym >> 4, s = sym & 15, to;
                if (s == 0 || s > 10 || r > 3 || ac->len[sym] == 0 || pos[from] + r + 1 > 62)
                    continue;
                to = (from + ac->len[sym] + s) & 7;
                if (t->count[to] != -1)
                    continue;
                t->count[to] = step + 1;
                memcpy(t->sym[to], t->sym[from], (size_t)step);
                t->sym[to][step] = (unsigned char)sym;
                pos[to] = pos[from] + r + 1;
                changed = 1;
            }
        }
    }
    for (e = 0; e < 8; e++)
        if (t->count[e] < 0)
            return 0;
    return 1;
}

static void put_dc(bitw *w, const hcodes *dc, int diff) {
    int s = nbits(diff);
    put_bits(w, dc->code[s], dc->len[s]);
    if (s)
        put_bits(w, (unsigned)(diff < 0 ? diff + (1 << s) - 1 : diff), s);
}

static PyObject *decode_indexed(PyObject *self, PyObject *args) {
    Py_buffer view, iview;
    int scale, order, ci, ok = 0;
    unsigned long top, left, height, width;
    struct jpeg_decompress_struct cinfo;
    error_mgr err;
    volatile int created = 0;
    layout lay;
    tuning tune;
    const unsigned char *data, *idx;
    size_t len, scan_start, pos;
    volatile size_t sos_at = 0, sof_at = 0;
    unsigned mcus_x, mcus_y, g, per_row, r0, r1, a, b, c0, c1, row;
    unsigned long y0f, y1f, x0f, x1f, syn_w, syn_h, dx, dy;
    unsigned char *buf = NULL;
    size_t cap;
    bitw w;
    int dummy_bits, stored = 0;
    (void)self;

    if (!PyArg_ParseTuple(args, "y*y*ikkkki|p", &view, &iview, &scale, &top, &left, &height, &width, &order,
                          &stored))
        return NULL;
    PyBuffer_Release(&iview); /* a bytes object: held by the caller */
    if (!check_args(scale, height, width, order)) {
        PyBuffer_Release(&view);
        return NULL;
    }
    data = (const unsigned char *)view.buf;
    len = (size_t)view.len;
    idx = (const unsigned char *)iview.buf;
    if ((size_t)iview.len < INDEX_HEAD || memcmp(idx, INDEX_MAGIC, 4) != 0 || get32(idx + 4) != len ||
        get32(idx + 8) + 8 > len || memcmp(idx + 24, data + get32(idx + 8), 8) != 0 ||
        memcmp(idx + 32, data + len - 8, 8) != 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "the index is not one of this JPEG");
        return NULL;
    }
    scan_start = get32(idx + 8);
    mcus_x = get16(idx + 12);
    mcus_y = get16(idx + 14);
    g = get16(idx + 16);
    per_row = get16(idx + 18);
    if (g == 0 || per_row != (mcus_x + g - 1) / g ||
        (size_t)iview.len != INDEX_HEAD + INDEX_POINT * ((size_t)per_row * mcus_y + 1)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "the index is not one of this JPEG");
        return NULL;
    }

    cinfo.err = init_errors(&err);
    if (setjmp(err.jump)) {
        if (created)
            jpeg_destroy_decompress(&cinfo);
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    jpeg_create_decompress(&cinfo);
    created = 1;
    jpeg_mem_src(&cinfo, data, (unsigned long)len);
    if (!stored)
        jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&cinfo, TRUE);
    if ((size_t)(cinfo.src->next_input_byte - data) == scan_start && read_layout(&cinfo, &lay) &&
        lay.mcus_x == mcus_x && lay.mcus_y == mcus_y && lay.ncomp == idx[20] && lay.mcu_w == idx[21] &&
        lay.mcu_h == idx[22] && (stored || exif_upright(&cinfo)) && cinfo.jpeg_color_space != JCS_CMYK &&
        cinfo.jpeg_color_space != JCS_YCCK && make_tuning(&lay.ac[0], &tune))
        ok = 1;
    for (ci = 0; ok && ci < lay.ncomp; ci++) /* the made-up MCU codes any DC value and an EOB */
        ok = lay.dc[ci].len[0] != 0;
    if (ok) {
        unsigned long oh = (cinfo.image_height + scale - 1) / scale, ow = (cinfo.image_width + scale - 1) / scale;
        if (top >= oh || height > oh - top || left >= ow || width > ow - left) {
            jpeg_destroy_decompress(&cinfo);
            PyBuffer_Release(&view);
            PyErr_Format(PyExc_ValueError, "rectangle %lux%lu at (%lu, %lu) outside the %lux%lu image at 1/%d", height,
                         width, top, left, oh, ow, scale);
            return NULL;
        }
    }
    if (!ok) {
        jpeg_destroy_decompress(&cinfo);
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    /* the marker segments up to the scan: the frame header to patch, the scan header to precede */
    pos = 2;
    while (pos + 4 <= scan_start) {
        unsigned m;
        if (data[pos] != 0xFF) {
            ok = 0;
            break;
        }
        m = data[pos + 1];
        if (m == 0xFF) {
            pos++;
            continue;
        }
        if (m == 0xC0 || m == 0xC1)
            sof_at = pos;
        if (m == 0xDA) {
            sos_at = pos;
            break;
        }
        pos += 2 + ((size_t)data[pos + 2] << 8 | data[pos + 3]);
    }
    if (!ok || sof_at == 0 || sos_at == 0) {
        jpeg_destroy_decompress(&cinfo);
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }

    /* the MCU rows and columns to copy: one MCU beyond the rectangle on every side */
    y0f = top * scale;
    y1f = (top + height) * scale;
    x0f = left * scale;
    x1f = (left + width) * scale;
    if (y1f > cinfo.image_height)
        y1f = cinfo.image_height;
    if (x1f > cinfo.image_width)
        x1f = cinfo.image_width;
    r0 = (unsigned)(y0f / lay.mcu_h);
    r0 = r0 > 0 ? r0 - 1 : 0;
    r1 = (unsigned)((y1f + lay.mcu_h - 1) / lay.mcu_h) + 1;
    r1 = r1 < mcus_y ? r1 : mcus_y;
    c0 = (unsigned)(x0f / lay.mcu_w);
    c0 = c0 > 0 ? c0 - 1 : 0;
    a = c0 / g * g;
    c1 = (unsigned)((x1f + lay.mcu_w - 1) / lay.mcu_w) + 1;
    b = (c1 + g - 1) / g * g;
    b = b < mcus_x ? b : mcus_x;
    syn_w = b < mcus_x ? (unsigned long)(1 + b - a) * lay.mcu_w : lay.mcu_w + cinfo.image_width - (unsigned long)a * lay.mcu_w;
    syn_h = r1 < mcus_y ? (unsigned long)(r1 - r0) * lay.mcu_h : cinfo.image_height - (unsigned long)r0 * lay.mcu_h;
    if (syn_w > 65535 || syn_h > 65535) { /* a frame header's fields are 16 bits */
        jpeg_destroy_decompress(&cinfo);
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    dy = (unsigned long)r0 * lay.mcu_h / scale;
    dx = (unsigned long)a * lay.mcu_w / scale; /* the made-up column is one MCU to the left */
    jpeg_destroy_decompress(&cinfo);
    created = 0;

    cap = sos_at + 6 + (scan_start - sos_at) + 2;
    for (row = r0; row < r1; row++) {
        const unsigned char *pa = idx + INDEX_HEAD + INDEX_POINT * ((size_t)row * per_row + a / g);
        const unsigned char *pb = b < mcus_x ? idx + INDEX_HEAD + INDEX_POINT * ((size_t)row * per_row + b / g)
                                             : idx + INDEX_HEAD + INDEX_POINT * ((size_t)(row + 1) * per_row);
        unsigned long oa = get32(pa), ob = get32(pb);
        for (ci = 0; ci < lay.ncomp; ci++) /* the made-up MCU's DC value needs its size's code */
            if (lay.dc[ci].len[nbits((short)get16(pa + 6 + 2 * ci))] == 0) {
                PyBuffer_Release(&view);
                Py_RETURN_NONE;
            }
        if (ob < oa || ob >= len || oa < scan_start || pa[4] > 7 || pb[4] > 7 || (oa == ob && pb[4] < pa[4])) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_ValueError, "the index is not one of this JPEG");
            return NULL;
        }
        cap += (ob - oa) + 2 * 400 + 8; /* the made-up MCU (stuffed at worst), padding, a marker */
    }
    buf = PyMem_Malloc(cap);
    if (buf == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    {
        PyThreadState *ts = PyEval_SaveThread();
        unsigned char *o = buf;
        size_t restart = (size_t)(1 + b - a);
        memcpy(o, data, sos_at);
        /* frame header: height, then width */
        o[sof_at + 5] = (unsigned char)(syn_h >> 8);
        o[sof_at + 6] = (unsigned char)syn_h;
        o[sof_at + 7] = (unsigned char)(syn_w >> 8);
        o[sof_at + 8] = (unsigned char)syn_w;
        o += sos_at;
        *o++ = 0xFF, *o++ = 0xDD, *o++ = 0, *o++ = 4, *o++ = (unsigned char)(restart >> 8), *o++ = (unsigned char)restart;
        memcpy(o, data + sos_at, scan_start - sos_at);
        o += scan_start - sos_at;
        w.p = o;
        w.acc = 0;
        w.n = 0;
        for (row = r0; row < r1; row++) {
            const unsigned char *pa = idx + INDEX_HEAD + INDEX_POINT * ((size_t)row * per_row + a / g);
            const unsigned char *pb = b < mcus_x ? idx + INDEX_HEAD + INDEX_POINT * ((size_t)row * per_row + b / g)
                                                 : idx + INDEX_HEAD + INDEX_POINT * ((size_t)(row + 1) * per_row);
            unsigned long oa = get32(pa), ob = get32(pb);
            int pha = pa[4] & 7, phb = pb[4] & 7, e, k;
            if (row > r0) {
                pad_bits(&w);
                *w.p++ = 0xFF;
                *w.p++ = (unsigned char)(0xD0 + ((row - r0 - 1) & 7));
            }
            /* the made-up MCU: its length first, then its bits */
            dummy_bits = 0;
            for (ci = 0; ci < lay.ncomp; ci++) {
                int nblocks = lay.mcu_blocks[ci];
                int pred = (short)get16(pa + 6 + 2 * ci), s = nbits(pred);
                dummy_bits += lay.dc[ci].len[s] + s + (nblocks - 1) * lay.dc[ci].len[0] + nblocks * lay.ac[ci].len[0];
            }
            e = (pha - dummy_bits) & 7;
            for (ci = 0; ci < lay.ncomp; ci++) {
                int nblocks = lay.mcu_blocks[ci], blk;
                int pred = (short)get16(pa + 6 + 2 * ci);
                for (blk = 0; blk < nblocks; blk++) {
                    put_dc(&w, &lay.dc[ci], blk == 0 ? pred : 0);
                    if (ci == 0 && blk == 0)
                        for (k = 0; k < tune.count[e]; k++) {
                            int sym = tune.sym[e][k], s = sym & 15;
                            put_bits(&w, lay.ac[0].code[sym], lay.ac[0].len[sym]);
                            put_bits(&w, (1u << s) - 1, s);
                        }
                    put_bits(&w, lay.ac[ci].code[0], lay.ac[ci].len[0]);
                }
            }
            /* the row's own bits, from the recorded phase on */
            if (oa == ob) {
                put_bits(&w, (data[oa] >> (8 - phb)) & ((1u << (phb - pha)) - 1), phb - pha);
            } else {
                size_t from = oa;
                if (pha) {
                    emit(&w, ((w.acc << (8 - w.n)) | (data[oa] & (0xFFu >> pha))) & 0xFF);
                    w.acc = 0;
                    w.n = 0;
                    from = oa + (data[oa] == 0xFF ? 2 : 1);
                }
                if (ob > from) {
                    memcpy(w.p, data + from, ob - from);
                    w.p += ob - from;
                }
                if (phb)
                    put_bits(&w, data[ob] >> (8 - phb), phb);
            }
        }
        pad_bits(&w);
        *w.p++ = 0xFF;
        *w.p++ = 0xD9;
        PyEval_RestoreThread(ts);
        {
            PyObject *got;
            size_t n = (size_t)(w.p - buf);
            /* the band never takes in the made-up column: beside the image's left edge the upsampling
             * repeats the edge, as it does in the whole image */
            got = region_core(buf, n, NULL, scale, top - dy, left + (unsigned long)lay.mcu_w / scale - dx, height, width,
                              order, (unsigned long)lay.mcu_w / scale, 1);
            PyMem_Free(buf);
            PyBuffer_Release(&view);
            return got;
        }
    }
}

/* The first warning libjpeg gives on the whole entropy-coded data ("Corrupt JPEG data: premature end
 * of data segment", "... extraneous bytes before marker 0xd9"): the data is decoded at 1/8 scale,
 * which still reads every bit of it, and nothing is printed. Returns the message, "" when there is
 * none, or None where libjpeg refuses the data (the ordinary decoders then say why). */
typedef struct {
    error_mgr base;
    char first[JMSG_LENGTH_MAX];
} warning_mgr;

static void on_warning(j_common_ptr cinfo, int level) {
    warning_mgr *err = (warning_mgr *)cinfo->err;
    if (level < 0) {
        if (err->base.pub.num_warnings == 0)
            (*cinfo->err->format_message)(cinfo, err->first);
        err->base.pub.num_warnings++;
    }
}

static PyObject *jpeg_warning(PyObject *self, PyObject *args) {
    Py_buffer view;
    struct jpeg_decompress_struct cinfo;
    warning_mgr err;
    PyThreadState *volatile released = NULL; /* volatile: changed between setjmp and a longjmp */
    JSAMPLE *volatile row = NULL;
    volatile int created = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    cinfo.err = init_errors(&err.base);
    err.base.pub.emit_message = on_warning;
    err.first[0] = '\0';
    if (setjmp(err.base.jump)) {
        if (released != NULL)
            PyEval_RestoreThread(released);
        PyMem_RawFree((void *)row);
        if (created)
            jpeg_destroy_decompress(&cinfo);
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    jpeg_create_decompress(&cinfo);
    created = 1;
    jpeg_mem_src(&cinfo, (const unsigned char *)view.buf, (unsigned long)view.len);
    released = PyEval_SaveThread();
    jpeg_read_header(&cinfo, TRUE);
    cinfo.scale_num = 1;
    cinfo.scale_denom = 8;
    cinfo.dct_method = JDCT_IFAST;
    cinfo.do_fancy_upsampling = FALSE;
    if (cinfo.jpeg_color_space == JCS_YCbCr || cinfo.jpeg_color_space == JCS_GRAYSCALE)
        cinfo.out_color_space = JCS_GRAYSCALE; /* no colour conversion: only the data is wanted */
    jpeg_start_decompress(&cinfo);
    row = PyMem_RawMalloc((size_t)cinfo.output_width * cinfo.output_components + 1);
    if (row == NULL) {
        PyEval_RestoreThread(released);
        jpeg_destroy_decompress(&cinfo);
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW rows[1] = {(JSAMPROW)row};
        if (jpeg_read_scanlines(&cinfo, rows, 1) != 1)
            break; /* the data ran out: libjpeg warned and filled the rest */
    }
    jpeg_finish_decompress(&cinfo);
    PyEval_RestoreThread(released);
    released = NULL;
    PyMem_RawFree((void *)row);
    jpeg_destroy_decompress(&cinfo);
    PyBuffer_Release(&view);
    return PyUnicode_DecodeLatin1(err.first, (Py_ssize_t)strlen(err.first), NULL);
}

/* ---- Bilinear resize of a uint8 HWC crop into CHW planes ------------------------------------
 * Half-pixel centres (OpenCV's INTER_LINEAR, torch's bilinear with align_corners=False), two taps
 * per axis: for shrinking under 2x and for enlarging. Each needed source row is split into its
 * channels and resized across with weights in 1/16384, kept as int16 in 1/128 of a level (at most
 * 255 * 128); two such rows are blended down with weights in 1/16384 and rounded once. Less than
 * 0.52 of a level from exact bilinear values on any content (0.5 for the last rounding, 2 x 255/32768
 * for the weights, 1/256 for the values across; OpenCV's INTER_LINEAR: up to 0.81). The AVX2 path
 * and the plain C path compute the same integers and give the same bytes. flip: mirrored left to
 * right. */

#define RS_GROUP 8     /* output columns per 16-byte window */
#define RS_ONE 16384   /* a weight of 1 */

typedef struct {
    int n;            /* groups */
    int32_t *start;   /* first source column of each group's window */
    int32_t *out;     /* first output column of each group */
    uint8_t *mask;    /* 16 per group: the pairs (left, right) of each output column in the window */
    int16_t *weight;  /* 16 per group: the pairs' weights */
} hgroups;

/* the first tap and its partner's weight in 1/RS_ONE for each output position along one axis */
static void axis(int in, int out, int32_t *s, int32_t *w) {
    double scale = (double)in / out;
    for (int o = 0; o < out; o++) {
        double f = (o + 0.5) * scale - 0.5;
        int i = (int)floor(f);
        double a = f - i;
        if (i < 0) {
            i = 0;
            a = 0;
        }
        int q = (int)lrint(a * RS_ONE);
        if (q >= RS_ONE) {
            i += 1;
            q = 0;
        }
        if (i >= in - 1) {
            i = in - 1;
            q = 0;
        }
        s[o] = i;
        w[o] = q;
    }
}

/* Cut the output columns (mirrored when flip) into runs whose taps lie in 16 source bytes. */
static int make_groups(const int32_t *sx, const int32_t *ax, int ow, int flip, hgroups *g) {
    int n = 0, x = 0;
    while (x < ow) {
        int k = 0, lo = 0, hi = 0;
        while (k < RS_GROUP && x + k < ow) {
            int m = flip ? ow - 1 - (x + k) : x + k;
            int l = sx[m], r = sx[m] + (ax[m] > 0);
            int nlo = k ? (l < lo ? l : lo) : l, nhi = k ? (r > hi ? r : hi) : r;
            if (nhi - nlo > 15)
                break;
            lo = nlo;
            hi = nhi;
            k++;
        }
        g->start[n] = lo;
        g->out[n] = x;
        uint8_t *mk = g->mask + 16 * n;
        int16_t *wt = g->weight + 16 * n;
        memset(mk, 0x80, 16);
        memset(wt, 0, 16 * sizeof(int16_t));
        for (int j = 0; j < k; j++) {
            int m = flip ? ow - 1 - (x + j) : x + j;
            int q = ax[m];
            mk[2 * j] = (uint8_t)(sx[m] - lo);
            mk[2 * j + 1] = (uint8_t)(sx[m] + (q > 0) - lo);
            wt[2 * j] = (int16_t)(RS_ONE - q);
            wt[2 * j + 1] = (int16_t)q;
        }
        n++;
        x += k;
    }
    g->n = n;
    return n;
}

static void hrow_c(const uint8_t *p, const hgroups *g, int16_t *h) {
    for (int n = 0; n < g->n; n++) {
        const uint8_t *src = p + g->start[n], *mk = g->mask + 16 * n;
        const int16_t *wt = g->weight + 16 * n;
        int16_t *o = h + g->out[n];
        for (int j = 0; j < 8; j++) {
            int v = 0;
            if (!(mk[2 * j] & 0x80))
                v = src[mk[2 * j]] * wt[2 * j] + src[mk[2 * j + 1]] * wt[2 * j + 1];
            o[j] = (int16_t)((v + 64) >> 7);
        }
    }
}

static void vrow_c(const int16_t *h0, const int16_t *h1, int b, int ow, uint8_t *dst) {
    for (int x = 0; x < ow; x++)
        dst[x] = (uint8_t)((h0[x] * (RS_ONE - b) + h1[x] * b + (1 << 20)) >> 21);
}

static void split_c(const uint8_t *src, int w, int c, uint8_t **planes) {
    for (int ch = 0; ch < c; ch++)
        for (int k = 0; k < w; k++)
            planes[ch][k] = src[k * c + ch];
}

#ifdef RS_X86
static uint8_t split_mask[3][3][16];

static void init_split_masks(void) {
    for (int ch = 0; ch < 3; ch++)
        for (int part = 0; part < 3; part++)
            for (int k = 0; k < 16; k++) {
                int byte = 3 * k + ch - 16 * part;
                split_mask[ch][part][k] = (byte >= 0 && byte < 16) ? (uint8_t)byte : 0x80;
            }
}

__attribute__((target("avx2"))) static void split_avx2(const uint8_t *src, int w, int c, uint8_t **planes) {
    int k = 0;
    if (c == 3) {
        __m128i m[3][3];
        for (int ch = 0; ch < 3; ch++)
            for (int part = 0; part < 3; part++)
                m[ch][part] = _mm_loadu_si128((const __m128i *)split_mask[ch][part]);
        for (; k + 16 <= w; k += 16) {
            const uint8_t *s = src + 3 * k;
            __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16)),
                    d = _mm_loadu_si128((const __m128i *)(s + 32));
            for (int ch = 0; ch < 3; ch++) {
                __m128i v = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, m[ch][0]), _mm_shuffle_epi8(b, m[ch][1])),
                                         _mm_shuffle_epi8(d, m[ch][2]));
                _mm_storeu_si128((__m128i *)(planes[ch] + k), v);
            }
        }
    }
    if (k < w) {
        uint8_t *rest[4];
        for (int ch = 0; ch < c; ch++)
            rest[ch] = planes[ch] + k;
        split_c(src + (size_t)k * c, w - k, c, rest);
    }
}

/* one window of a row resized across: 8 int32 values in 1/128 of a level */
__attribute__((target("avx2"))) static inline __m256i hwin_avx2(const uint8_t *p, __m128i mk, __m256i wt) {
    const __m256i v = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)p), mk)), wt);
    return _mm256_srai_epi32(_mm256_add_epi32(v, _mm256_set1_epi32(64)), 7);
}

/* the channels of one source row resized across: h[ch] */
__attribute__((target("avx2"))) static void hrow_avx2(uint8_t *const *planes, int c, const hgroups *g, int16_t **h) {
    int n = 0;
    for (; n + 2 <= g->n; n += 2) {
        const __m128i ma = _mm_loadu_si128((const __m128i *)(g->mask + 16 * n));
        const __m128i mb = _mm_loadu_si128((const __m128i *)(g->mask + 16 * (n + 1)));
        const __m256i wa = _mm256_loadu_si256((const __m256i *)(g->weight + 16 * n));
        const __m256i wb = _mm256_loadu_si256((const __m256i *)(g->weight + 16 * (n + 1)));
        const int a = g->start[n], b = g->start[n + 1], oa = g->out[n], ob = g->out[n + 1];
        for (int ch = 0; ch < c; ch++) {
            const uint8_t *p = planes[ch];
            /* a 0-3 b 0-3 | a 4-7 b 4-7, then a 0-7 | b 0-7 */
            __m256i v = _mm256_packs_epi32(hwin_avx2(p + a, ma, wa), hwin_avx2(p + b, mb, wb));
            v = _mm256_permute4x64_epi64(v, 0xd8);
            _mm_storeu_si128((__m128i *)(h[ch] + oa), _mm256_castsi256_si128(v));
            _mm_storeu_si128((__m128i *)(h[ch] + ob), _mm256_extracti128_si256(v, 1));
        }
    }
    for (; n < g->n; n++) {
        const __m128i ma = _mm_loadu_si128((const __m128i *)(g->mask + 16 * n));
        const __m256i wa = _mm256_loadu_si256((const __m256i *)(g->weight + 16 * n));
        for (int ch = 0; ch < c; ch++) {
            __m256i v = _mm256_packs_epi32(hwin_avx2(planes[ch] + g->start[n], ma, wa), _mm256_setzero_si256());
            v = _mm256_permute4x64_epi64(v, 0xd8);
            _mm_storeu_si128((__m128i *)(h[ch] + g->out[n]), _mm256_castsi256_si128(v));
        }
    }
}

__attribute__((target("avx2"))) static void vrow_avx2(const int16_t *h0, const int16_t *h1, int b, int ow,
                                                      uint8_t *dst) {
    const __m256i w = _mm256_set1_epi32((int)(((unsigned)b << 16) | (unsigned)(RS_ONE - b)));
    const __m256i round = _mm256_set1_epi32(1 << 20);
    int x = 0;
    for (; x + 16 <= ow; x += 16) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(h0 + x)), c = _mm256_loadu_si256((const __m256i *)(h1 + x));
        __m256i lo = _mm256_madd_epi16(_mm256_unpacklo_epi16(a, c), w); /* 0-3 | 8-11 */
        __m256i hi = _mm256_madd_epi16(_mm256_unpackhi_epi16(a, c), w); /* 4-7 | 12-15 */
        lo = _mm256_srai_epi32(_mm256_add_epi32(lo, round), 21);
        hi = _mm256_srai_epi32(_mm256_add_epi32(hi, round), 21);
        __m256i p = _mm256_packs_epi32(lo, hi);                          /* 0-7 | 8-15 */
        __m128i q = _mm_packus_epi16(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
        _mm_storeu_si128((__m128i *)(dst + x), q);
    }
    if (x < ow)
        vrow_c(h0 + x, h1 + x, b, ow - x, dst + x);
}

static int use_avx2(void) {
    static int v = -1;
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx2") ? 1 : 0;
        if (v)
            init_split_masks();
    }
    return v;
}
#else
static int use_avx2(void) { return 0; }
#endif

/* The rows of a resize: no Python calls, run without the GIL. */
static void resize_rows(const uint8_t *src, size_t stride, int width, int c, int oh, int ow, const int32_t *sy,
                        const int32_t *by, const hgroups *gp, uint8_t **planes, int16_t *hrows, size_t hw, uint8_t *dst,
                        int avx) {
    const hgroups g = *gp;
    (void)avx;
    int held[2] = {-1, -1}; /* the source row resized across in each slot */
    for (int y = 0; y < oh; y++) {
        int need[2] = {sy[y], by[y] ? sy[y] + 1 : sy[y]};
        int slot_of[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            int r = need[k], s = held[0] == r ? 0 : held[1] == r ? 1 : -1;
            if (s < 0) {
                if (k == 0) /* keep the row the second tap may still need */
                    s = held[0] == need[1] ? 1 : 0;
                else
                    s = 1 - slot_of[0];
                const uint8_t *row = src + (size_t)r * (size_t)stride;
                int16_t *h[3];
                for (int ch = 0; ch < c; ch++)
                    h[ch] = hrows + ((size_t)s * 3 + ch) * hw;
#ifdef RS_X86
                if (avx) {
                    split_avx2(row, (int)width, c, planes);
                    hrow_avx2(planes, c, &g, h);
                } else
#endif
                {
                    split_c(row, (int)width, c, planes);
                    for (int ch = 0; ch < c; ch++)
                        hrow_c(planes[ch], &g, h[ch]);
                }
                held[s] = r;
            }
            slot_of[k] = s;
        }
        for (int ch = 0; ch < c; ch++) {
            const int16_t *h0 = hrows + ((size_t)slot_of[0] * 3 + ch) * hw;
            const int16_t *h1 = hrows + ((size_t)slot_of[1] * 3 + ch) * hw;
            uint8_t *d = dst + ((size_t)ch * oh + y) * ow;
#ifdef RS_X86
            if (avx)
                vrow_avx2(h0, h1, by[y], ow, d);
            else
#endif
                vrow_c(h0, h1, by[y], ow, d);
        }
    }
}

/* The resize of src (rows x width x c, rows `stride` bytes apart) into a new bytearray of c planes
 * of oh x ow, mirrored left to right when flip; simd 0: the plain C path. Called with the GIL held. */
static PyObject *resize_core(const uint8_t *src, int rows, int width, size_t stride, int c, int oh, int ow, int flip,
                             int simd) {
    int avx = simd && use_avx2();
    int ngmax = ow; /* at most one group per output column */
    size_t pw = (size_t)width + 32, hw = (size_t)ow + 16;
    PyObject *out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)c * oh * ow);
    size_t ints = 2 * (size_t)ow + 2 * (size_t)oh + 2 * (size_t)ngmax + 8;
    size_t bytes = ints * 4 + 48 * (size_t)ngmax + 48 + 3 * pw + 2 * 3 * hw * sizeof(int16_t) + 64;
    unsigned char *mem = PyMem_RawMalloc(bytes);
    if (out == NULL || mem == NULL) {
        Py_XDECREF(out);
        PyMem_RawFree(mem);
        return PyErr_NoMemory();
    }
    memset(mem, 0, bytes);
    int32_t *sx = (int32_t *)mem, *ax = sx + ow, *sy = ax + ow, *by = sy + oh;
    hgroups g;
    g.start = by + oh;
    g.out = g.start + ngmax;
    g.mask = (uint8_t *)(g.out + ngmax + 8);
    g.weight = (int16_t *)(g.mask + 16 * (size_t)ngmax + 16);
    uint8_t *planes[3];
    planes[0] = (uint8_t *)(g.weight + 16 * (size_t)ngmax + 16);
    planes[1] = planes[0] + pw;
    planes[2] = planes[1] + pw;
    int16_t *hrows = (int16_t *)(((uintptr_t)(planes[2] + pw) + 31) & ~(uintptr_t)31); /* [slot][channel] */
    axis(width, ow, sx, ax);
    axis(rows, oh, sy, by);
    make_groups(sx, ax, ow, flip, &g);
    uint8_t *dst = (uint8_t *)PyByteArray_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    resize_rows(src, stride, width, c, oh, ow, sy, by, &g, planes, hrows, hw, dst, avx);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(mem);
    return out;
}

static int resize_shape_ok(long long rows, long long width, int c, int oh, int ow) {
    return rows >= 1 && width >= 1 && rows <= 65535 && width <= 65535 && (c == 1 || c == 3) && oh >= 1 && ow >= 1 &&
           oh <= 65535 && ow <= 65535;
}

/* resize_planes(array, out_h, out_w, flip[, simd]) -> bytearray of channels x out_h x out_w
 *   array: uint8 rows x width (x 1 or 3 channels), pixels contiguous within a row (any row stride);
 *   simd: 0 takes the plain C path (the same bytes). ValueError for anything else. */
static PyObject *resize_planes(PyObject *self, PyObject *args) {
    PyObject *obj, *out;
    Py_buffer view;
    int oh, ow, flip, simd = 1;
    (void)self;
    if (!PyArg_ParseTuple(args, "Oiip|p", &obj, &oh, &ow, &flip, &simd))
        return NULL;
    if (PyObject_GetBuffer(obj, &view, PyBUF_RECORDS_RO) < 0)
        return NULL;
    if (oh < 1 || ow < 1 || oh > 65535 || ow > 65535) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "resize_planes: an output of %d x %d; each side must be 1-65535", oh, ow);
        return NULL;
    }
    int ok = view.itemsize == 1 && (view.format == NULL || strcmp(view.format, "B") == 0) &&
             (view.ndim == 2 || view.ndim == 3);
    Py_ssize_t rows = ok ? view.shape[0] : 0, width = ok ? view.shape[1] : 0;
    int c = ok && view.ndim == 3 ? (int)view.shape[2] : 1;
    ok = ok && resize_shape_ok(rows, width, c, oh, ow) && view.strides[1] == c &&
         (view.ndim == 2 || view.strides[2] == 1) && view.strides[0] >= width * c;
    if (!ok) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError,
                        "resize_planes: a uint8 array of rows x width (x 1 or 3 channels) with contiguous rows");
        return NULL;
    }
    out = resize_core((const uint8_t *)view.buf, (int)rows, (int)width, (size_t)view.strides[0], c, oh, ow, flip, simd);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"jpeg_warning", jpeg_warning, METH_VARARGS, "jpeg_warning(data) -> str | None"},
    {"decode_region", decode_region, METH_VARARGS,
     "decode_region(data, scale, top, left, height, width, order[, stored]) -> (pixels, rows, band, channels, offset) | "
     "None"},
    {"jpeg_index", jpeg_index, METH_VARARGS, "jpeg_index(data) -> bytes | None"},
    {"resize_planes", resize_planes, METH_VARARGS, "resize_planes(array, out_h, out_w, flip[, simd]) -> bytearray"},
    {"decode_indexed", decode_indexed, METH_VARARGS,
     "decode_indexed(data, index, scale, top, left, height, width, order[, stored]) -> as decode_region | None"},
    {NULL, NULL, 0, NULL},
};

/* The version of this source the binary was built from: the first 12 hex digits of the SHA-256 of this file without
 * this line (tests/test_region.py checks it, and datakit/io.py's _REGION_SOURCE). A wheel built where an earlier
 * build/ holds a binary, the new source failing to compile, ships the old one: datakit then leaves it unused. */
#define DATAKIT_REGION_SOURCE "224240f7e7ae"

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jpegregion", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__jpegregion(void) {
    PyObject *m = PyModule_Create(&module);
    /* STORED: decode_region and decode_indexed take `stored` (extensions built before do not);
     * RESIZE_SIMD: resize_planes runs its AVX2 path here (its plain C path is slower than OpenCV's) */
    if (m != NULL && Damaged == NULL)
        Damaged = PyErr_NewException("datakit._jpegregion.DamagedJPEG", PyExc_RuntimeError, NULL);
    if (m != NULL && (Damaged == NULL || PyModule_AddObjectRef(m, "DamagedJPEG", Damaged) < 0 ||
                      PyModule_AddIntConstant(m, "LIBJPEG_VERSION", JPEG_LIB_VERSION) < 0 ||
                      PyModule_AddIntConstant(m, "STORED", 1) < 0 ||
                      PyModule_AddIntConstant(m, "RESIZE_SIMD", use_avx2()) < 0 ||
                      PyModule_AddStringConstant(m, "SOURCE", DATAKIT_REGION_SOURCE) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
