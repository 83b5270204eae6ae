"""The GPU and interconnect catalogs: data sanity, datasheet values, lookup, user overrides."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from planner.errors import InputError
from planner.hardware import catalog
from planner.hardware.devices import DTYPES

GIB = 2**30
MIB = 2**20

REQUIRED_GPUS = [
    'v100-16g', 'v100-32g', 't4', 'a10', 'a10g', 'l4', 'l40s', 'a40', 'rtx-a6000',
    'rtx-3090', 'rtx-4090', 'rtx-5090', 'a100-40g-pcie', 'a100-40g-sxm', 'a100-80g-pcie',
    'a100-80g-sxm', 'h100-pcie', 'h100-sxm', 'h100-nvl', 'h20', 'h200', 'gh200', 'b200',
    'mi250x', 'mi300x', 'mi325x',
]  # fmt: skip
REQUIRED_LINKS = [
    'ib-hdr', 'ib-ndr', 'ib-xdr', 'ib-ndr200', 'roce-200', 'roce-400', 'efa-p4d', 'efa-p5',
    'eth-100g', 'eth-25g', 'eth-10g',
]  # fmt: skip

# Dense peaks from the vendor datasheets (sparse figures halved), FLOP/s.
DATASHEET_PEAKS = [
    ('h100-sxm', 'bf16', 989.4e12),
    ('h100-sxm', 'fp8', 1978.9e12),
    ('h100-sxm', 'tf32', 494.7e12),
    ('h100-pcie', 'bf16', 756e12),
    ('h200', 'bf16', 989.4e12),
    ('a100-80g-sxm', 'bf16', 312e12),
    ('a100-40g-pcie', 'tf32', 156e12),
    ('a100-80g-sxm', 'fp32', 19.5e12),
    ('v100-32g', 'fp16', 125e12),
    ('b200', 'bf16', 2250e12),
    ('b200', 'fp8', 4500e12),
    ('mi300x', 'bf16', 1307.4e12),
    ('mi300x', 'fp8', 2614.9e12),
    ('l40s', 'bf16', 362e12),
    ('rtx-4090', 'bf16', 165.2e12),
]

# (name NVML reports, catalog id) for real devices.
NVML_EXACT = [
    ('NVIDIA H100 80GB HBM3', 'h100-sxm'),
    ('NVIDIA H100 PCIe', 'h100-pcie'),
    ('NVIDIA H100 NVL', 'h100-nvl'),
    ('NVIDIA A100-SXM4-80GB', 'a100-80g-sxm'),
    ('NVIDIA A100-SXM4-40GB', 'a100-40g-sxm'),
    ('A100-SXM4-40GB', 'a100-40g-sxm'),
    ('NVIDIA A100 80GB PCIe', 'a100-80g-pcie'),
    ('NVIDIA A100-PCIE-40GB', 'a100-40g-pcie'),
    ('Tesla V100-SXM2-16GB', 'v100-16g'),
    ('Tesla T4', 't4'),
    ('NVIDIA A10G', 'a10g'),
    ('NVIDIA L40S', 'l40s'),
    ('NVIDIA L40', 'l40'),
    ('NVIDIA GeForce RTX 4090', 'rtx-4090'),
    ('NVIDIA RTX 6000 Ada Generation', 'rtx-6000-ada'),
    ('NVIDIA RTX A6000', 'rtx-a6000'),
    ('NVIDIA H200', 'h200'),
    ('NVIDIA GH200 480GB', 'gh200'),
    ('NVIDIA B200', 'b200'),
    ('NVIDIA GB200', 'gb200'),
    ('AMD Instinct MI300X', 'mi300x'),
]

# Names no catalog entry lists verbatim, matched by the token rule.
NVML_FUZZY = [
    ('NVIDIA A100-SXM4-40GB MIG 1g.5gb', None, 'a100-40g-sxm'),  # a MIG slice
    ('Tesla V100-PCIE-32GB', None, 'v100-32g'),  # nearest: the 32 GB V100
    ('NVIDIA A100-PCIE-80GB', None, 'a100-80g-pcie'),  # PCIe and 80GB both count
    ('NVIDIA H100 SXM5 80GB', None, 'h100-sxm'),
    ('NVIDIA GeForce RTX 4090 D', None, 'rtx-4090'),
    ('NVIDIA H100', 100_485_038_080, 'h100-nvl'),  # memory tells the NVL apart
    ('NVIDIA H100', 85_520_809_984, 'h100-sxm'),
]

NVML_UNKNOWN = [
    ('NVIDIA H800', None),  # another chip
    ('NVIDIA A800-SXM4-80GB', None),
    ('NVIDIA GH200 144G HBM3e', None),  # a memory size the catalog does not have
    ('NVIDIA GeForce RTX 4090 Laptop GPU', 16 * GIB),  # memory rules out the desktop card
    ('Matrox G200eW', None),
]


@pytest.fixture
def gpus():
    return catalog.load_gpus()


@pytest.fixture
def links():
    return catalog.load_interconnects()


@pytest.fixture
def user_toml():
    """Path of user.toml in the folder the autouse fixture points BATCHFIT_CONFIG_DIR at."""
    folder = Path(os.environ['BATCHFIT_CONFIG_DIR'])
    folder.mkdir(parents=True, exist_ok=True)
    return folder / 'user.toml'


# ----------------------------------------------------------------- data sanity


def test_catalog_has_the_gpus_planners_ask_for(gpus):
    assert len(gpus) >= 25
    assert set(REQUIRED_GPUS) <= set(gpus)


def test_catalog_has_the_common_networks(links):
    assert set(REQUIRED_LINKS) <= set(links)


def test_every_gpu_is_sane(gpus):
    for key, gpu in gpus.items():
        peaks = gpu.peak_flops
        assert set(peaks) <= set(DTYPES), key
        assert peaks['fp32'] > 0, key
        for dtype in ('tf32', 'bf16', 'fp16', 'fp8'):
            if dtype in peaks:
                assert peaks[dtype] >= peaks['fp32'], (key, dtype)
        if 'fp8' in peaks:
            assert peaks['fp8'] >= peaks['bf16'], key
        assert 8 * GIB <= gpu.memory_bytes <= 300 * GIB, key
        assert 100e9 <= gpu.hbm_bandwidth_bytes_per_s <= 10e12, key
        assert 10e9 <= gpu.intra_node_bandwidth_bytes_per_s <= 900e9, key
        assert 0 < gpu.price_per_gpu_hour_usd < 20, key
        assert 50 <= gpu.tdp_watts <= 1500, key
        assert gpu.vendor in ('nvidia', 'amd'), key
        assert gpu.source, key
        assert gpu.nvml_names or gpu.vendor == 'amd', key


def test_peaks_follow_the_architecture(gpus):
    for gpu in gpus.values():
        if gpu.family in ('volta', 'turing'):
            assert 'bf16' not in gpu.peak_flops, gpu.key
            assert 'tf32' not in gpu.peak_flops, gpu.key
        if gpu.family in ('volta', 'turing', 'ampere', 'cdna2'):
            assert 'fp8' not in gpu.peak_flops, gpu.key
        if gpu.family == 'hopper':
            assert gpu.peak_flops['fp8'] == pytest.approx(2 * gpu.peak_flops['bf16'], rel=0.01)
        if 'bf16' in gpu.peak_flops and 'fp16' in gpu.peak_flops:
            assert gpu.peak_flops['bf16'] == gpu.peak_flops['fp16'], gpu.key


def test_every_link_is_sane(links):
    for key, link in links.items():
        assert 0.1e9 <= link.bandwidth_bytes_per_s <= 1e12, key
        assert 0 < link.latency_s < 1e-3, key
        assert link.source, key


@pytest.mark.parametrize(('key', 'dtype', 'flops'), DATASHEET_PEAKS)
def test_datasheet_peaks(gpus, key, dtype, flops):
    assert gpus[key].peak_flops[dtype] == pytest.approx(flops, rel=0.01)


def test_memory_is_what_the_driver_reports(gpus):
    assert gpus['h100-sxm'].memory_bytes == 81559 * MIB
    assert gpus['h200'].memory_bytes == 143771 * MIB
    assert gpus['a100-80g-sxm'].memory_bytes == 81920 * MIB
    assert gpus['b200'].memory_bytes == 183359 * MIB
    assert gpus['mi300x'].memory_bytes == 205_822_885_888


def test_links_are_one_direction_per_gpu(gpus, links):
    # NVLink 4 is 900 GB/s counting both directions; a 400 Gb/s NDR rail is 50 GB/s.
    assert gpus['h100-sxm'].intra_node_bandwidth_bytes_per_s == 450e9
    assert gpus['a100-80g-sxm'].intra_node_bandwidth_bytes_per_s == 300e9
    assert links['ib-ndr'].bandwidth_bytes_per_s == 50e9
    # EFA on p4d: 400 Gb/s per node over 8 GPUs.
    assert links['efa-p4d'].bandwidth_bytes_per_s == pytest.approx(400e9 / 8 / 8)


def test_mi250x_is_one_gcd_of_the_package(gpus):
    # The datasheet's 383 TF / 128 GB is for two GCDs, each its own device.
    gcd = gpus['mi250x']
    assert 2 * gcd.peak_flops['bf16'] == pytest.approx(383e12, rel=0.01)
    assert 2 * gcd.peak_flops['fp32'] == pytest.approx(95.7e12, rel=0.01)
    assert gcd.memory_bytes == pytest.approx(64 * GIB, rel=0.01)


def test_no_spelling_names_two_gpus(gpus, links):
    for specs in (gpus, links):
        clashes = {name: keys for name, keys in catalog._index(specs).items() if len(keys) > 1}
        assert clashes == {}


# ----------------------------------------------------------------- lookup


@pytest.mark.parametrize(
    ('text', 'key'),
    [
        ('h100-sxm', 'h100-sxm'),
        ('H100', 'h100-sxm'),
        ('h100 SXM', 'h100-sxm'),
        ('NVIDIA H100 80GB HBM3', 'h100-sxm'),
        ('nvidia h100 sxm5 80gb', 'h100-sxm'),
        ('A100-80G', 'a100-80g-sxm'),
        ('a100_40g_pcie', 'a100-40g-pcie'),
        ('4090', 'rtx-4090'),
        ('GeForce RTX 3090', 'rtx-3090'),
        ('Tesla V100-SXM2-16GB', 'v100-16g'),
        ('MI300X', 'mi300x'),
        ('AMD Instinct MI325X', 'mi325x'),
        ('  L40S ', 'l40s'),
    ],
)
def test_find_gpu_by_any_spelling(text, key):
    assert catalog.find_gpu(text).key == key


@pytest.mark.parametrize(
    ('text', 'key'),
    [('NDR', 'ib-ndr'), ('IB HDR', 'ib-hdr'), ('p4d', 'efa-p4d'), ('100GbE', 'eth-100g')],
)
def test_find_interconnect_by_any_spelling(text, key):
    assert catalog.find_interconnect(text).key == key


def test_unknown_gpu_suggests_near_names():
    with pytest.raises(InputError, match=r"unknown GPU 'h10'; did you mean: .*h100") as info:
        catalog.find_gpu('h10')
    assert info.value.field == '--gpu'
    assert 'h100-sxm' in info.value.allowed


def test_unknown_gpu_without_near_names():
    with pytest.raises(InputError, match=r"unknown GPU 'quantum toaster'") as info:
        catalog.find_gpu('quantum toaster')
    assert 'did you mean' not in str(info.value)


def test_unknown_interconnect_names_its_field():
    with pytest.raises(InputError, match=r'did you mean: .*ib-ndr') as info:
        catalog.find_interconnect('ib-nrd')
    assert info.value.field == '--inter-node'


# ----------------------------------------------------------------- NVML names


@pytest.mark.parametrize(('nvml_name', 'key'), NVML_EXACT)
def test_match_nvml_exact(nvml_name, key):
    assert catalog.match_nvml_name(nvml_name).key == key


@pytest.mark.parametrize(('nvml_name', 'memory_bytes', 'key'), NVML_FUZZY)
def test_match_nvml_fuzzy(nvml_name, memory_bytes, key):
    assert catalog.match_nvml_name(nvml_name, memory_bytes=memory_bytes).key == key


@pytest.mark.parametrize(('nvml_name', 'memory_bytes'), NVML_UNKNOWN)
def test_match_nvml_unknown(nvml_name, memory_bytes):
    assert catalog.match_nvml_name(nvml_name, memory_bytes=memory_bytes) is None


# ----------------------------------------------------------------- user additions

NEW_GPU = """
[gpus.my-accel]
name = "Example Accelerator 96GB"
vendor = "nvidia"
family = "hopper"
memory_bytes = 96e9
peak_flops = { fp32 = 50e12, bf16 = 700e12 }
hbm_bandwidth_bytes_per_s = 3e12
intra_node_link = "PCIe 5.0 x16"
intra_node_bandwidth_bytes_per_s = 50e9
nvml_names = ["Example Accel"]
aliases = ["accel"]
"""


def test_user_toml_overrides_only_given_fields(user_toml):
    builtin = catalog.load_gpus()['h100-sxm']
    user_toml.write_text(
        '[gpus.h100-sxm]\nprice_per_gpu_hour_usd = 1.25\npeak_flops = { bf16 = 900e12 }\n',
        encoding='utf-8',
    )
    h100 = catalog.find_gpu('h100')
    assert h100.price_per_gpu_hour_usd == 1.25
    assert h100.peak_flops['bf16'] == 900e12
    assert h100.peak_flops['fp8'] == builtin.peak_flops['fp8']  # merged per dtype
    assert h100.memory_bytes == builtin.memory_bytes
    assert h100.nvml_names == builtin.nvml_names


def test_user_toml_adds_a_gpu(user_toml):
    user_toml.write_text(NEW_GPU, encoding='utf-8')
    gpus = catalog.load_gpus()
    assert len(gpus) == len(catalog.load_gpus(user_toml.with_name('absent.toml'))) + 1
    accel = catalog.find_gpu('ACCEL')
    assert accel.key == 'my-accel'
    assert accel.memory_bytes == 96_000_000_000
    assert isinstance(accel.memory_bytes, int)
    assert accel.price_per_gpu_hour_usd == 0.0  # defaults apply to optional fields
    assert catalog.match_nvml_name('Example Accel') == accel


def test_user_toml_adds_an_interconnect(user_toml):
    user_toml.write_text(
        '[interconnects.my-fabric]\nname = "Lab fabric"\nbandwidth_bytes_per_s = 10e9\n',
        encoding='utf-8',
    )
    assert catalog.find_interconnect('my fabric').bandwidth_bytes_per_s == 10e9


def test_explicit_user_toml_path(tmp_path):
    path = tmp_path / 'elsewhere.toml'
    path.write_text('[gpus.t4]\ntdp_watts = 75\n', encoding='utf-8')
    assert catalog.find_gpu('t4', user_toml=path).tdp_watts == 75
    assert catalog.find_gpu('t4').tdp_watts == 70  # the default file is untouched


def _load_both():
    catalog.load_gpus()
    catalog.load_interconnects()


@pytest.mark.parametrize(
    ('text', 'message'),
    [
        ('[gpus.new-gpu]\nname = "x"\nvendor = "nvidia"\n', r'new-gpu.*needs family, memory_bytes'),
        ('[gpus.h100-sxm]\nmemory_bytes = -1\n', r'h100-sxm.*memory_bytes must be positive'),
        ('[gpus.h100-sxm]\nmemory_bytes = 1.5\n', 'must be a whole number'),
        ('[gpus.h100-sxm]\npeak_flops = { int4 = 1e15 }\n', 'unknown dtype.*int4'),
        ('[gpus.h100-sxm]\npeak_flops = { bf16 = "fast" }\n', 'bf16 must be a number'),
        ('[gpus.h100-sxm]\nprice_per_hour = 2.0\n', r'unknown field\(s\): price_per_hour'),
        ('[gpus.h100-sxm]\naliases = "h"\n', 'aliases must be a list'),
        ('[gpus.h100-sxm]\nhbm_bandwidth_bytes_per_s = true\n', 'must be a number'),
        ('gpus = 3\n', r'\[gpus\.<key>\]'),
        ('[gpus."bad key!"]\nname = "x"\n', 'catalog ids use'),
        ('[interconnects.ib-ndr]\nbandwidth_bytes_per_s = 0\n', 'ib-ndr.*must be positive'),
        ('[gpus.h100-sxm\nname = "x"\n', 'not valid TOML'),
    ],
)
def test_bad_user_toml_raises(user_toml, text, message):
    user_toml.write_text(text, encoding='utf-8')
    with pytest.raises(InputError, match=message) as info:
        _load_both()
    assert 'user.toml' in str(info.value)


def test_new_gpu_needs_fp32_peak(user_toml):
    user_toml.write_text(NEW_GPU.replace('fp32 = 50e12, ', ''), encoding='utf-8')
    with pytest.raises(InputError, match=r'my-accel.*fp32'):
        catalog.load_gpus()


def test_bad_builtin_file_names_file_and_key(tmp_path, monkeypatch):
    (tmp_path / 'gpus.toml').write_text(
        '[broken]\nname = "x"\nvendor = "nvidia"\nfamily = "ampere"\nmemory_bytes = 0\n'
        'peak_flops = { fp32 = 1e12 }\nhbm_bandwidth_bytes_per_s = 1e12\n'
        'intra_node_link = "PCIe"\nintra_node_bandwidth_bytes_per_s = 1e9\n',
        encoding='utf-8',
    )
    monkeypatch.setattr(catalog, 'resource_path', lambda name: tmp_path / name)
    catalog.reload()
    try:
        with pytest.raises(InputError, match=r'gpus\.toml \[broken\].*memory_bytes must be'):
            catalog.load_gpus()
    finally:
        monkeypatch.undo()
        catalog.reload()
    assert 'h100-sxm' in catalog.load_gpus()


def test_loaded_dict_is_a_copy():
    catalog.load_gpus().clear()
    assert 'h100-sxm' in catalog.load_gpus()
