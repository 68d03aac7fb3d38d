"""Builders for real test data: zip archives written byte by byte, and photo-like images; and the
exact bilinear values a resize is measured against.

Python's ``zipfile`` always flags non-ASCII names as UTF-8, so it cannot write the archives
that Chinese Windows writes (GBK name bytes, no flag). :func:`build_zip` writes the bytes of
the format itself, so tests and sample generators can make exactly the archives users get.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "CORPUS_ENCODINGS",
    "HELD_OUT_CORPUS",
    "CLASS_FOLDER_CORPUS",
    "NAME_CORPUS",
    "TYPICAL_HOST",
    "ZipEntry",
    "bilinear_exact",
    "build_zip",
    "synthetic_image",
    "unicode_path_extra",
]

_UNIX_MADE_BY = (3 << 8) | 20
_DOS_MADE_BY = 20


@dataclass
class ZipEntry:
    """One member of an archive built by :func:`build_zip`.

    ``name`` is the raw name as stored (bytes, already encoded however the test wants).
    ``declared_size`` overrides the uncompressed size written in the headers (for bomb
    tests); ``symlink_to`` makes a Unix symlink member; ``encrypted`` sets the encryption
    flag; ``method`` 0 stores, 8 deflates, anything else is written as given.
    ``external_attr`` and ``made_by`` override the central directory's attribute and
    "version made by" fields (host in the high byte: 0 MS-DOS, 3 Unix, 11 NTFS).
    """

    name: bytes
    data: bytes = b""
    method: int = 8
    utf8_flag: bool = False
    extra: bytes = b""
    encrypted: bool = False
    declared_size: int | None = None
    symlink_to: bytes | None = None
    mode: int | None = None
    date_time: tuple[int, int, int, int, int, int] = (2024, 5, 17, 10, 30, 0)
    comment: bytes = field(default=b"")
    external_attr: int | None = None
    made_by: int | None = None


def unicode_path_extra(header_name: bytes, unicode_name: str, crc: int | None = None) -> bytes:
    """An Info-ZIP Unicode Path extra field (0x7075, version 1) for ``header_name``."""
    crc = zlib.crc32(header_name) if crc is None else crc
    body = b"\x01" + struct.pack("<I", crc) + unicode_name.encode("utf-8")
    return struct.pack("<HH", 0x7075, len(body)) + body


def _dos_time(dt: tuple[int, int, int, int, int, int]) -> tuple[int, int]:
    y, mo, d, h, mi, s = dt
    return (h << 11) | (mi << 5) | (s // 2), ((y - 1980) << 9) | (mo << 5) | d


def build_zip(entries: list[ZipEntry], *, truncate_at: int | None = None) -> bytes:
    """The bytes of a zip archive holding ``entries`` exactly as described."""
    out = bytearray()
    central = bytearray()
    for e in entries:
        data = e.symlink_to if e.symlink_to is not None else e.data
        crc = zlib.crc32(data)
        if e.method == 8:
            comp = zlib.compressobj(6, zlib.DEFLATED, -15)
            payload = comp.compress(data) + comp.flush()
        else:
            payload = data
        flags = (0x800 if e.utf8_flag else 0) | (0x1 if e.encrypted else 0)
        usize = len(data) if e.declared_size is None else e.declared_size
        mtime, mdate = _dos_time(e.date_time)
        offset = len(out)
        out += struct.pack(
            "<IHHHHHIIIHH", 0x04034B50, 20, flags, e.method, mtime, mdate, crc, len(payload), usize,
            len(e.name), len(e.extra),
        )  # fmt: skip
        out += e.name + e.extra + payload
        if e.symlink_to is not None:
            made_by, attr = _UNIX_MADE_BY, (0o120777 << 16)
        elif e.mode is not None:
            made_by, attr = _UNIX_MADE_BY, (e.mode << 16)
        else:
            made_by, attr = _DOS_MADE_BY, (0x10 if e.name.endswith(b"/") else 0)
        if e.external_attr is not None:
            attr = e.external_attr
        if e.made_by is not None:
            made_by = e.made_by
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII", 0x02014B50, made_by, 20, flags, e.method, mtime, mdate, crc,
            len(payload), usize, len(e.name), len(e.extra), len(e.comment), 0, 0, attr, offset,
        )  # fmt: skip
        central += e.name + e.extra + e.comment
    cd_offset = len(out)
    out += central
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central), cd_offset, 0)
    if truncate_at is not None:
        del out[truncate_at:]
    return bytes(out)


def synthetic_image(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A smooth, photo-like uint8 RGB image (gradients plus noise) that compresses like a photo."""
    rng = np.random.default_rng(seed)
    y = np.linspace(0, 1, height, dtype=np.float32)[:, None]
    x = np.linspace(0, 1, width, dtype=np.float32)[None, :]
    img = np.empty((height, width, 3), dtype=np.float32)
    for c in range(3):
        a, b, f = rng.uniform(0.2, 1.0, 3)
        img[..., c] = 127 + 80 * np.sin(2 * np.pi * (a * x * f * 3 + b * y * 2 + c))
    img += rng.normal(0, 12, img.shape).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


# Realistic file names per language, for measuring legacy-encoding detection (tests and tools/bench_encoding.py).
NAME_CORPUS: dict[str, list[str]] = {
    "western": [
        "Müller_Bericht_2023.docx",
        "Größe/Übersicht.xlsx",
        "Präsentation März.pptx",
        "Café_Menü.pdf",
        "Fotos/Sommerferien_Österreich.jpg",
        "Schüler/Zeugnis_Jürgen.pdf",
        "Straße_Plan.png",
        "Rechnungen/Gebühren_Februar.xlsx",
        "élève/été_2022.jpg",
        "Résumé_François.doc",
        "Photos/Noël_à_Québec.jpg",
        "Thèse_définitive.pdf",
        "Préparation/réunion_équipe.docx",
        "Año_nuevo/niño_pequeño.png",
        "Canción_española.mp3",
        "Información_técnica.pdf",
        "São_Paulo/fotografia_açúcar.jpg",
        "Relatório_Conceição.docx",
        "Ação_de_Graças.png",
        "Skärgård/Åland_båt.jpg",
        "Kød_og_Ørred.txt",
        "Blåbær/sæson.jpg",
        "Göteborg_möte.pptx",
        "Zürich/Bahnhofstraße.jpg",
        "Köln/Dom_Außenansicht.jpg",
        "Anträge/Förderung_2024.pdf",
        "Crème_brûlée_recette.txt",
        "Kunden/Müller & Söhne.xlsx",
        "Über uns.html",
        "Bäckerei_Brötchen.jpg",
    ],
    "russian": [
        "Отчет_2023.docx",
        "Фотографии/Москва_лето.jpg",
        "Документы/договор аренды.pdf",
        "Презентация.pptx",
        "кошка_01.jpg",
        "собака/щенок.png",
        "Новая папка/изображение.jpg",
        "Бухгалтерия/счет-фактура.xlsx",
        "Письмо директору.doc",
        "Расписание занятий.pdf",
        "Семья/день рождения мамы.jpg",
        "Работа/проект_итог.docx",
        "Сканы/паспорт.jpg",
        "Музыка/песня.mp3",
        "Книги/Война и мир.txt",
        "отпуск_море.jpg",
        "Договор поставки №15.pdf",
        "Инструкция по эксплуатации.pdf",
        "Смета на ремонт.xlsx",
        "Дача/огород весной.jpg",
        "Заявление.docx",
        "Приказ о назначении.pdf",
        "черновик.txt",
        "Таблица данных.csv",
        "Санкт-Петербург/Эрмитаж.jpg",
        "Зима/снеговик.png",
        "Школа/домашнее задание.docx",
        "Объявление.txt",
        "Журнал учета.xlsx",
        "Результаты анализов.pdf",
    ],
    "japanese": [
        "写真/ねこの写真.jpg",
        "テスト画像.png",
        "資料/表示.txt",
        "会議資料_2023年.pdf",
        "新しいフォルダー/画像001.jpg",
        "見積書.xlsx",
        "請求書_株式会社.pdf",
        "旅行/京都の紅葉.jpg",
        "議事録.docx",
        "デジカメ/家族写真.jpg",
        "契約書（最終版）.pdf",
        "データ/売上一覧.csv",
        "東京タワー.jpg",
        "お知らせ.txt",
        "プレゼン資料.pptx",
        "設計図面/平面図.pdf",
        "日報_田中.xlsx",
        "スクリーンショット.png",
        "音楽/さくら.mp3",
        "学習用データ/犬.jpg",
        "花見_桜.jpg",
        "名簿.xlsx",
        "報告書_第二版.docx",
        "猫/三毛猫.jpg",
        "仕様書.pdf",
        "練習問題.txt",
    ],
    "chinese_simplified": [
        "训练/猫_01.jpg",
        "数据集/狗.png",
        "新建文件夹/图片.jpg",
        "说明文件.txt",
        "会议纪要.docx",
        "财务报表_2023年.xlsx",
        "照片/北京天安门.jpg",
        "合同/租房合同.pdf",
        "验证集/鸟类.jpg",
        "测试图片.png",
        "工作总结.docx",
        "学生名单.xlsx",
        "毕业论文_最终版.pdf",
        "家庭/全家福.jpg",
        "标注数据/行人检测.json",
        "产品介绍.pptx",
        "身份证扫描件.jpg",
        "课程表.xlsx",
        "旅游/西湖风景.jpg",
        "项目计划书.docx",
        "发票/增值税发票.pdf",
        "样本/花朵_玫瑰.jpg",
        "通知.txt",
        "简历_张伟.pdf",
        "微信图片_20230101.jpg",
        "数据/汽车分类.csv",
    ],
    "chinese_traditional": [
        "資料/貓咪照片.jpg",
        "測試圖片.png",
        "訓練資料/狗.jpg",
        "新增資料夾/圖片.jpg",
        "會議記錄.docx",
        "財務報表.xlsx",
        "照片/台北101.jpg",
        "合約/租屋合約.pdf",
        "說明文件.txt",
        "工作報告.docx",
        "學生名單.xlsx",
        "畢業論文.pdf",
        "家庭/全家福.jpg",
        "產品介紹.pptx",
        "旅遊/日月潭風景.jpg",
        "專案計畫書.docx",
        "發票.pdf",
        "樣本/花朵.jpg",
        "通知.txt",
        "履歷_陳大文.pdf",
        "課程表.xlsx",
        "香港/維多利亞港.jpg",
        "報價單.xlsx",
        "菜單.pdf",
    ],
    "korean": [
        "사진/고양이.jpg",
        "새 폴더/이미지.png",
        "보고서_2023.docx",
        "학습데이터/강아지.jpg",
        "회의록.docx",
        "재무제표.xlsx",
        "서울/남산타워.jpg",
        "계약서_최종.pdf",
        "설명서.txt",
        "학생명단.xlsx",
        "졸업논문.pdf",
        "가족사진.jpg",
        "제품소개.pptx",
        "여행/제주도 바다.jpg",
        "프로젝트 계획서.docx",
        "영수증.pdf",
        "꽃/장미.jpg",
        "공지사항.txt",
        "이력서_김민수.pdf",
        "시간표.xlsx",
        "견적서.xlsx",
        "음악/노래.mp3",
        "스크린샷.png",
        "데이터/자동차.csv",
    ],
}
# which encodings each language is written in by the systems that still write legacy names
CORPUS_ENCODINGS: dict[str, tuple[str, ...]] = {
    "western": ("cp437", "cp850", "cp1252"),
    "russian": ("cp866", "koi8_r", "cp1251"),
    "japanese": ("cp932",),
    "chinese_simplified": ("gbk",),
    "chinese_traditional": ("big5",),
    "korean": ("cp949",),
}
# the host that writes each encoding: DOS/Windows tools write OEM code pages, Unix the locale's
TYPICAL_HOST: dict[str, int] = {"cp1252": 11, "cp1251": 11, "koi8_r": 3, "utf-8": 3}
# Names written apart from the character lists in datakit.filenames (everyday subjects, not data
# sets), to see how the detection does on vocabulary it was not written with.
HELD_OUT_CORPUS: dict[str, list[str]] = {
    "western": [
        "Geburtstagsfeier_Großmutter.jpg",
        "Hochzeit/Trauung_Kirche_Brühl.jpg",
        "Wanderung_Schwäbische_Alb.gpx",
        "Bücherliste_für_Weihnachten.txt",
        "Fête_des_mères.jpg",
        "Vacances/Côte_d'Azur_plage.jpg",
        "Boulangerie_pâtisserie.pdf",
        "Fútbol_campeón.mp4",
        "Mañana_en_la_montaña.jpg",
        "Pão_de_queijo_receita.txt",
        "Smörgåsbord.jpg",
        "Fjällvandring_sommar.jpg",
        "Hyggelig_jul_hjemme.jpg",
        "Führerschein_Vorderseite.jpg",
        "Kindergeburtstag_Luftballons.jpg",
        "Grüße_aus_Düsseldorf.jpg",
    ],
    "russian": [
        "Новогодний утренник.mp4",
        "Бабушкин торт.jpg",
        "Поход на Эльбрус.gpx",
        "Список покупок.txt",
        "Выпускной вечер.jpg",
        "Рыбалка на озере.jpg",
        "Свадьба Ивана и Марии.jpg",
        "Водительские права.jpg",
        "Квитанция за свет.pdf",
        "Щенок хаски.jpg",
        "Ёлка во дворе.jpg",
        "Юбилей дедушки.mp4",
        "Чек из магазина.jpg",
        "Жёлтые листья.jpg",
        "Цветы в саду.jpg",
        "Экзамен по физике.docx",
    ],
    "japanese": [
        "お正月の家族写真.jpg",
        "母の誕生日ケーキ.jpg",
        "大阪城の夜景.jpg",
        "博物館入場券.pdf",
        "富士山登山ルート.docx",
        "パンダの赤ちゃん.jpg",
        "鍋料理レシピ.xlsx",
        "初めての歩み.mp4",
        "運転免許証.jpg",
        "リフォーム案.png",
        "忘年会景品リスト.xlsx",
        "健康診断結果.pdf",
        "銀杏並木.jpg",
        "週末ハイキング.jpg",
        "祖母の餃子.jpg",
        "蓮の池.jpg",
        "雪の中の子犬.jpg",
        "新幹線切符.pdf",
        "結婚式招待状.psd",
    ],
    "chinese_simplified": [
        "春节联欢晚会.mp4",
        "妈妈的生日蛋糕.jpg",
        "上海外滩夜景.jpg",
        "故宫博物院门票.pdf",
        "长城徒步攻略.docx",
        "熊猫宝宝吃竹子.jpg",
        "火锅店菜谱.xlsx",
        "孩子第一次走路.mp4",
        "驾驶证正面.jpg",
        "房屋装修效果图.png",
        "公司年会抽奖名单.xlsx",
        "小区停车位租赁.docx",
        "医院体检报告.pdf",
        "银杏叶落满地.jpg",
        "周末爬山.jpg",
        "奶奶包饺子.jpg",
        "荷花池塘.jpg",
        "雪地里的小狗.jpg",
        "高铁车票.pdf",
        "婚礼请柬设计.psd",
    ],
    "chinese_traditional": [
        "春節聯歡晚會.mp4",
        "媽媽的生日蛋糕.jpg",
        "九份老街夜景.jpg",
        "故宮博物院門票.pdf",
        "太魯閣步道攻略.docx",
        "熊貓寶寶吃竹子.jpg",
        "火鍋店菜譜.xlsx",
        "孩子第一次走路.mp4",
        "駕駛執照正面.jpg",
        "房屋裝潢效果圖.png",
        "公司尾牙抽獎名單.xlsx",
        "醫院體檢報告.pdf",
        "銀杏葉落滿地.jpg",
        "週末爬山.jpg",
        "奶奶包餃子.jpg",
        "荷花池塘.jpg",
        "雪地裡的小狗.jpg",
        "高鐵車票.pdf",
        "婚禮請帖設計.psd",
    ],
    "korean": [
        "설날 가족모임.mp4",
        "엄마 생신 케이크.jpg",
        "부산 해운대 야경.jpg",
        "경복궁 입장권.pdf",
        "한라산 등산 코스.docx",
        "판다 아기 대나무.jpg",
        "김치찌개 레시피.xlsx",
        "아이 첫걸음.mp4",
        "운전면허증 앞면.jpg",
        "인테리어 시안.png",
        "송년회 경품 명단.xlsx",
        "건강검진 결과.pdf",
        "은행나무 단풍.jpg",
        "주말 등산.jpg",
        "할머니 만두.jpg",
        "연꽃 연못.jpg",
        "눈 속의 강아지.jpg",
        "기차표.pdf",
        "청첩장 디자인.psd",
    ],
}
# Class folders of image datasets, one or two characters most often (a folder per class: 蝗虫/IMG_0001.jpg):
# written apart from the character lists in datakit.filenames, everyday things and subjects of data sets;
# the words of each language parted by spaces
CLASS_FOLDER_CORPUS: dict[str, str] = {
    "chinese_simplified": (
        "书包 钥匙 眼镜 手表 台灯 风扇 空调 洗衣机 微波炉 吹风机 牙刷 毛巾 拖鞋 雨衣 围巾 手套 "
        "袜子 裙子 裤子 衬衫 外套 夹克 西装 领带 戒指 项链 耳环 手镯 钱包 护照 门票 发票 收据 "
        "菜单 药品 药瓶 针头 纱布 绷带 轮椅 拐杖 担架 救护车 消防车 警车 出租车 挖掘机 推土机 "
        "起重机 拖拉机 收割机 帆船 游艇 潜艇 直升机 热气球 降落伞 风筝 足球 篮球 排球 网球 "
        "乒乓球 羽毛球 棒球 滑板 滑雪 游泳 跑步 跳舞 唱歌 读书 写字 画画 做饭 睡觉 喝水 骑车 "
        "走路 站立 坐下 躺下 蚊子 苍蝇 蟑螂 蜗牛 螃蟹 虾 章鱼 海星 水母 珊瑚 仙人掌 竹子 松树 "
        "柳树 枫叶 银杏 稻草 麦穗 瓢虫 蝗虫 蚜虫 霜冻 冰雹 闪电 彩虹 日出 日落"
    ),
    "chinese_traditional": (
        "書包 鑰匙 眼鏡 手錶 檯燈 風扇 冷氣 洗衣機 微波爐 牙刷 毛巾 拖鞋 雨衣 圍巾 手套 襪子 "
        "裙子 褲子 襯衫 外套 夾克 西裝 領帶 戒指 項鍊 耳環 錢包 護照 門票 發票 收據 菜單 藥品 "
        "繃帶 輪椅 救護車 消防車 警車 計程車 挖土機 起重機 拖拉機 帆船 遊艇 潛艇 直升機 熱氣球 "
        "降落傘 風箏 足球 籃球 排球 網球 桌球 羽毛球 棒球 滑板 滑雪 游泳 跑步 跳舞 唱歌 讀書 "
        "寫字 畫畫 做飯 睡覺 蚊子 蒼蠅 蟑螂 蝸牛 螃蟹 蝦 章魚 海星 水母 珊瑚 仙人掌 竹子 松樹 "
        "柳樹 楓葉 銀杏 閃電 彩虹 日出 日落"
    ),
    "japanese": (
        "鞄 鍵 眼鏡 時計 扇風機 冷蔵庫 洗濯機 歯ブラシ 手袋 靴下 財布 指輪 薬 包帯 車椅子 "
        "救急車 消防車 警察 船 潜水艦 凧 野球 水泳 踊り 歌 読書 料理 睡眠 食事 蚊 蝿 蟹 海老 "
        "蛸 珊瑚 竹 松 柳 紅葉 銀杏 雷 虹 日の出 夕日 寿司 刺身 天ぷら 饅頭 団子 茶碗 箸 皿 "
        "傘 靴 帽子 眼 歯 指 爪"
    ),
    "korean": (
        "열쇠 지갑 반지 목걸이 귀걸이 장갑 양말 치마 바지 셔츠 외투 넥타이 여권 영수증 메뉴 약 "
        "붕대 휠체어 구급차 소방차 경찰차 택시 굴착기 크레인 트랙터 요트 잠수함 헬리콥터 열기구 "
        "낙하산 연 축구 농구 배구 테니스 탁구 배드민턴 야구 골프 스키 수영 달리기 춤 노래 독서 "
        "그림 요리 잠 식사 걷기 모기 파리 바퀴벌레 달팽이 게 새우 문어 불가사리 해파리 산호 "
        "선인장 대나무 소나무 버드나무 단풍 은행 번개 무지개 일출 일몰 김밥 떡볶이 비빔밥 불고기 "
        "냉면 만두 젓가락 우편 편지 봉투 택배 상자"
    ),
}


def bilinear_exact(img: np.ndarray, height: int, width: int) -> np.ndarray:
    """The exact bilinear values of a resize of ``img`` (H x W or H x W x C) to ``height`` x ``width``,
    half-pixel centres and edges clamped (OpenCV's INTER_LINEAR, torch's ``align_corners=False``), in
    float64, C x H x W: what datakit's compiled resize is measured against."""
    x = img.astype(np.float64)
    if x.ndim == 2:
        x = x[:, :, None]

    def taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        f = np.clip((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0, n_in - 1)
        i = np.minimum(np.floor(f).astype(int), n_in - 1)
        return i, np.minimum(i + 1, n_in - 1), f - i

    y0, y1, b = taps(x.shape[0], height)
    x0, x1, a = taps(x.shape[1], width)
    rows = x[y0] * (1 - b)[:, None, None] + x[y1] * b[:, None, None]
    out = rows[:, x0] * (1 - a)[None, :, None] + rows[:, x1] * a[None, :, None]
    return out.transpose(2, 0, 1)
