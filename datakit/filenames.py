"""The legacy encoding of zip member names: candidates, a plausibility score, an honest verdict.

Zip names without the UTF-8 flag are bytes in whatever code page the writing system used: an
OEM code page on DOS and Windows (CP437/CP850 Western, CP866 Cyrillic, CP932, GBK, Big5, CP949),
the locale's encoding on Unix (UTF-8, KOI8-R, ...). Every candidate that decodes all names is
scored on how plausible the result is as file names: characters common in the script the
encoding is for, one script across all names and within each word, a normal letter case, and the
host that wrote the archive. When the two best distinct readings are close, the verdict says so.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["CANDIDATES", "EncodingGuess", "decode_name", "decodes", "guess_encoding", "json_text", "text_codec"]


def _windows_bytes(exc: UnicodeError, replace: bool = False) -> tuple[str, int]:
    """Bytes Python's ``gbk`` and ``big5`` codecs refuse, read as Windows' code pages 936 and 950 (which
    Chinese Windows writes names in) read them: 0x80, the euro sign, and Big5's ETEN additions (碁 銹 裏 墻,
    which ``cp950`` decodes). Anything else is refused, or replaced with U+FFFD."""
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    raw, i = exc.object, exc.start
    if raw[i] == 0x80:
        return "€", i + 1
    if exc.encoding == "big5" and i + 1 < len(raw):
        try:
            return bytes(raw[i : i + 2]).decode("cp950"), i + 2
        except UnicodeDecodeError:
            pass
    if replace:
        return "\ufffd", exc.end
    raise exc


codecs.register_error("datakit-windows", _windows_bytes)
codecs.register_error("datakit-windows-replace", lambda exc: _windows_bytes(exc, replace=True))


def text_codec(name: str) -> str | None:
    """Python's name of the codec ``name`` when it turns bytes into text (gbk, utf-8, big5, ...); None for an
    unknown name and for codecs that do not (rot13, hex, base64) or that no name or table is written in
    (undefined, punycode; idna, a host name's codec, takes no error handler)."""
    try:
        info = codecs.lookup(name)
    except LookupError:
        return None
    if not getattr(info, "_is_text_encoding", True) or info.name in ("undefined", "punycode", "idna"):
        return None
    return info.name


def _errors(enc: str, replace: bool = False) -> str:
    """The error handler names in ``enc`` are decoded with."""
    if codecs.lookup(enc).name in ("gbk", "big5"):
        return "datakit-windows-replace" if replace else "datakit-windows"
    return "replace" if replace else "strict"


def decode_name(raw: bytes, enc: str) -> str:
    """A member name's bytes as text in ``enc``, as Windows reads them for GBK and Big5; bytes that are
    not text in it become U+FFFD."""
    return raw.decode(enc, _errors(enc, replace=True))


# (codec, the host family that writes it: "dos" for DOS/Windows OEM code pages, "unix", or "any")
CANDIDATES = (
    ("utf-8", "any"),
    ("gbk", "any"),
    ("big5", "any"),
    ("cp932", "any"),
    ("cp949", "any"),
    ("cp437", "dos"),
    ("cp850", "dos"),
    ("cp866", "dos"),
    ("cp1252", "windows"),
    ("cp1251", "windows"),
    ("koi8_r", "unix"),
)
# "version made by" host numbers (APPNOTE 4.4.2): which hosts write OEM code pages
_OEM = frozenset({"cp437", "cp850", "cp866", "gbk", "gb18030", "big5", "cp932", "cp949", "cp852", "cp857", "cp874"})
# code pages that are no candidate (choosing among them would cost the corpora's readings: CP1254 reads most of
# CP1252, CP852 most of CP437), scored for a reading of letters far more plausible than the best one's: named
# as a rival, never chosen (Turkish CP857 'kuş' read as CP437 'kuƒ', Polish CP852 'źródło' as '½ródêo', Thai)
WATCHED = (("cp852", "dos"), ("cp857", "dos"), ("cp1250", "windows"), ("cp1254", "windows"), ("cp874", "windows"))
WATCH_MARGIN = 0.3
WATCH_PLAUSIBLE = 0.6
_HOSTS = dict(CANDIDATES) | dict(WATCHED)
_DOS_HOSTS = {0, 6, 11, 14}  # MS-DOS/FAT, OS/2 HPFS, NTFS, VFAT
_UNIX_HOSTS = {3, 19}  # Unix, OS X
AMBIGUITY_MARGIN = 0.12
# of the legacy archives datakit reads, most were made on Chinese Windows: where GBK's reading and another are
# this much further apart than AMBIGUITY_MARGIN, the other is still named as a rival (the best is taken either way)
GBK_MARGIN = 0.05
# names whose non-ASCII text is one character (a class folder '农', a file '锌.jpg') say too little to
# choose between two plausible readings (农 in GBK is 크 in CP949, 写 is д in UTF-8): any reading this close to
# the best is named as a rival, so the choice comes with a warning, and GBK, when among them, is chosen
# a best reading scoring under this is said to be ambiguous, naming the next one, however far that is behind: no
# candidate reads the names plausibly (Polish CP1250 read as CP1252, 0.04); every name of the corpora in
# datakit.testing reads at 0.35 or more in its own encoding
DOUBTFUL = 0.25
THIN_EVIDENCE_CHARS = 1
THIN_EVIDENCE_MARGIN = 0.6
THIN_EVIDENCE_PLAUSIBLE = 0.7  # such a rival reads as a common character itself (not ü read by CP932 as a symbol)
MAX_SCORED = 500  # names scored per archive (evenly spaced); every name must still decode
SCORED_CHARS = 256  # of each, the first characters: a name of 10,000 says no more than its start (and cost 0.3 s)

# Russian letters by frequency in running text (most common first)
_RU_FREQ = "оеаинтсрвлкмдпуяыьгзбчйхжшюцщэфъё"
_RU_SCORE = {c: (1.0 if i < 15 else 0.75 if i < 24 else 0.45 if i < 30 else 0.1) for i, c in enumerate(_RU_FREQ)}
# accented Latin letters in Western European file names (German, French, Spanish, Portuguese, Nordic)
_LATIN_TIERS = (
    (1.0, set("éèàäöüßçñáíóúãâêôåøæÄÖÜÉ")),
    (0.6, set("ëïîûùìòõœÅØÆÇÑÁÍÓÚÈÀÊ")),
    (0.3, set("ÿËÎÏÔÛÙÒÌÂÃÕŒŠšŽžŸýÝ")),
)
# the letters of Central European words (Polish, Czech, Slovak, Hungarian: Windows-1250) beyond the Western ones
_CENTRAL_EUROPEAN = frozenset("ąćęłńśźżčďěňřšťůžőűĺľŕĄĆĘŁŃŚŹŻČĎĚŇŘŠŤŮŽŐŰĹĽŔ")
_TURKISH = frozenset("ğĞışŞİ")  # beyond the Western letters (ç ö ü) Turkish shares
_NATIVE = {"cp852": _CENTRAL_EUROPEAN, "cp1250": _CENTRAL_EUROPEAN, "cp857": _TURKISH, "cp1254": _TURKISH}
# The characters most used in file names and everyday text, per script (most common first). A
# reading made of these is far more plausible than one made of merely valid characters: Korean
# bytes read as GBK are all valid GB2312 level-1 characters, but few of them are common ones.
_HANZI_COMMON = (
    "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十用"
    "发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从知使点业本高现实长电意两走机部"
    "加文美问内全开明正几很想被老力重间相外名新手位题打产等并样应真百化工话通做因然情北期总各市常已儿结水给书口身边平更"
    "建物件报合计接原何义表先少路区月动门安西金图系山数据片照夹测试训练验证集标注样本视频资料告纪财务单论庭介绍课程旅游"
    "风景项划票花朵知简历微信汽车类猫狗鸟身份扫描京海南东城市场品设备管理系统模型网络版终稿附录目索引格式调查研究院校医疗"
    "银行保险税费商店购买卖价值交易客户服务员工资考核录音乐歌曲电影片剧集动画漫游戏软硬程序代码源文档案卷宗批注释说明书"
    "册规范标准流程方案报价合同协议证明执照营业登记申请审批决定通知公告会议纪要总结汇报年度季月周日早晚春夏秋冬节假日期"
    "红黄蓝绿白黑色彩光影像素尺寸大小高宽长度重量温度颜形状体积面积地址电话邮箱号码账户密码用户名称姓男女老少儿童学生教师"
    "班级成绩分数考试题答案作业练习实验数学语英物理化生历史政治体育美术音信息技术课件讲义复习资料库存货物流快递包裹"
)
# people's names, which photos and documents are named after: the common surnames and given-name characters
_NAMES_SIMPLIFIED = (
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程苏魏吕丁任沈姚卢姜崔钟谭陆"
    "汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔向汤伟芳娜敏静丽强磊军洋勇艳杰娟"
    "涛明超秀霞平刚桂英华玉萍红兰凤梅琳晶燕飞鹏辉宇浩然子轩梓涵欣怡佳琪雨晨思博文俊峰志鑫鸿婷雪倩颖慧嘉豪建国庆春"
)
_NAMES_TRADITIONAL = (
    "陳楊黃趙吳劉張鄭謝許韓馮鄧蕭葉蘇魏呂盧鍾譚陸範賈韋鄒孫馬羅蔣蔡餘閆龍賀顧龔萬錢嚴湯偉芳娜敏靜麗強磊軍洋勇豔傑娟"
    "濤剛桂華萍蘭鳳琳晶燕飛鵬輝宇浩軒涵欣怡佳琪雨晨思博俊峰誌鑫鴻婷雪倩穎慧嘉豪建國慶"
)
# Japanese: the commonest surnames' and given names' kanji, and everyday words of file names
_KANJI_COMMON = (
    "佐藤鈴木高橋田中伊渡辺山本村小林加吉松井清水崎森池阿部石川前後岡長坂野上遠斎斉原西太郎次子美恵香奈愛結菜翔輝"
    "真写画像資料会社東京大阪京都名古屋横浜神戸福岡札幌仙台広島旅行休冬春秋桜猫犬鳥花見和平正健誠直樹智雄幸浩"
    "宮島谷内藤橋本酒井工菊地武竹千葉北海道沖縄縄県市区町駅店様報告書請求領収書類提出議事録案内予定表"
)
_HANZI_COMMON_TRAD = (
    "的一是不了人我在有他這為之大來以個中上們到說國和地也子時道出而要於就下得可你年生自會那後能對著事其裡所去行過家十用"
    "發天如然作方成者多日都三小軍二無同麼經法當起與好看學進種將還分此心前面又定見只主沒公從知使點業本高現實長電意兩走機部"
    "加文美問內全開明正幾很想被老力重間相外名新手位題打產等並樣應真百化工話通做因情北期總各市常已兒結水給書口身邊平更"
    "建物件報合計接原何義表先少路區月動門安西金圖系山數據片照夾測試訓練驗證集標註樣本視頻影資料告紀財務單論庭介紹課程旅遊"
    "風景項劃票花朵知簡歷履微信汽車類貓咪狗鳥身份掃描京海南東城市場品設備管理系統模型網路版終稿附錄目索引格式調查研究院校醫療"
    "銀行保險稅費商店購買賣價值交易客戶服務員工資考核錄音樂歌曲電影劇集動畫漫遊戲軟硬程序代碼源文檔案卷宗批註釋說明書"
    "冊規範標準流程方案報價合約協議證明執照營業登記申請審批決定通知公告會議紀要總結匯報年度季月週日早晚春夏秋冬節假日期"
    "紅黃藍綠白黑色彩光影像素尺寸大小高寬長度重量溫度顏形狀體積面積地址電話郵箱號碼帳戶密碼用戶名稱姓男女老少兒童學生教師"
    "班級成績分數考試題答案作業練習實驗數學語英物理化歷史政治體育美術訊息技術課件講義複習庫存貨物流快遞包裹增夾灣臺台北潭港維多利亞菜菜單"
)
_HANGUL_COMMON = (
    "이다의는에가을하고지서한기로도사시인를리대정자수어보아나부일년전우무상주라구소제요성화국장경모신비해마여문동유오내위개조"
    "심명각면원생방진고양폴더미지보서데터회록재무표울남산탑워계약최종설학명단졸업논족품소개행제바프로젝트획영증꽃장미공항력김민"
    "간견적음악노래스크린샷자차새파일사진문서자료목록번호주소전화이름날짜시간월일금토요업무팀회의결과분석통합관리시스템"
)


# the class names of image datasets (class folders are often one or two characters: 苹果/, 健康/, 焊缝/): fruit,
# animals, vehicles, scenes, industrial defects, medical findings, emotions, plants and their diseases, waste sorting
_LABELS_SIMPLIFIED = (
    "苹果香蕉橘子橙柠檬葡萄西瓜草莓桃梨樱桃芒果菠萝荔枝龙眼椰猕猴柚石榴柿蓝莓哈密瓜白菜萝卜胡土豆番茄黄茄辣椒洋葱蒜南"
    "蘑菇菠芹菜生豆角玉米猫狗鸟鱼马牛羊猪鸡鸭鹅兔老虎狮熊象猴颈鹿斑狼狐狸蛇青蛙乌龟鲸豚鲨企鹅鹦鹉鼠松蝴蝶蜜蜂蚂蚁蜘蛛"
    "昆虫害轿卡货巴士摩托飞铁轮船骑红绿灯牌志停限速建筑房屋桥梁街树森林卉草云雨雪雾晴阴夜晚室海滩沙漠脉河湖乡村农田"
    "异缺陷裂纹缝划痕伤污渍脏锈蚀腐变破损失漏错泡杂焊凹凸毛刺斑色差褶皱针孔断磨良品合格次螺丝零电路板阳阴肺炎肿瘤"
    "节骨折恶病血症息肉囊溃疡眼底皮肤细胞组织胸片理微笑哭泣愤怒惊讶怕恐惧开心兴快乐难悲伤静厌恶气玫瑰葵郁金香蒲公英"
    "雏菊百合荷牡丹兰桂梅杜鹃稻麦棉茶叶病健康实茎根种籽枯萎霉垃圾回收厨余塑料玻璃纸箱属池瓶罐衣服鞋罩烟头帽吸火焰"
    "积摔跌倒攀爬闯越界脸部脚睛嘴巴鼻耳朵发镜背伞脑键盘椅桌沙床冰箱碗刀叉勺钟景未知负左右"
)
_LABELS_TRADITIONAL = (
    "蘋果香蕉橘子橙檸檬葡萄西瓜草莓桃梨櫻芒鳳荔枝椰獼猴柚石榴柿藍哈密白菜蘿蔔土豆番茄黃瓜辣椒洋蔥蒜南蘑菇貓狗鳥魚馬"
    "牛羊豬雞鴨鵝兔老虎獅熊象猴頸鹿斑狼狐狸蛇青蛙烏龜鯨豚鯊企鵝鸚鵡鼠松蝴蝶蜜蜂螞蟻蜘蛛昆蟲害轎卡貨巴士摩托腳踏飛鐵"
    "輪船騎紅綠燈牌誌停限速建築房屋橋梁街樹森林卉雲雨雪霧晴陰夜晚室海灘沙漠脈河湖鄉村農田異缺陷裂紋縫刮劃痕傷污漬髒"
    "鏽蝕腐變破損失漏錯泡雜焊凹凸毛刺色差皺針孔斷磨良品合格次螺絲零電路板陽陰肺炎腫瘤節骨折惡病血症息肉囊潰瘍眼底皮"
    "膚細胞組織胸片理微笑哭泣憤怒驚訝怕恐懼開心興快樂難悲傷靜厭惡氣玫瑰葵鬱金香蒲公英雛菊百合荷牡丹蘭桂梅杜鵑稻麥棉"
    "茶葉健康實莖根種籽枯萎霉垃圾回收廚餘塑膠料玻璃紙箱屬池瓶罐衣服鞋罩煙頭帽吸火焰積摔跌倒攀爬闖越界臉部睛嘴巴鼻耳"
    "朵髮鏡背傘腦鍵盤椅桌床冰碗刀叉勺鐘景未知負左右朋友"
)
_LABELS_JAPANESE = (
    "魚牛羊豚馬鳥犬猫友達検証欠陥傷汚笑顔病気果実薔薇桜自動車転飛機電歩者信号建物橋木花空雲雨雪夜朝海山川森林草葉根"
    "種稲麦米豆野菜林檎蜜柑葡萄苺桃梨西瓜人手足目口耳髪男女供大老正常異良品不合格陽陰腫瘍骨折肺炎怒驚悲喜恐怖嫌悪"
    "立学習評価訓練試験検査画写真背景前物体他明亀蛇蛙熊鹿狐狼猿象虎獅鯨鮫蝶蜂蟻蜘蛛虫"
)
# Korean words of everyday speech and of datasets' classes, whose syllables are the common ones beyond the list above
_HANGUL_LABELS = (
    "사과바나나포도수박딸기복숭아배귤오렌지레몬망고파인애플체리고양이강아지개새물고기말소양돼지닭오리토끼호랑이사자곰판다코"
    "끼리원숭이기린얼룩말늑대여우사슴뱀개구리거북이고래돌고래상어펭귄앵무새쥐다람쥐나비벌개미거미곤충자동차승용차트럭버스자"
    "전거오토바이비행기기차지하철보행자신호등표지판도로차선번호판건물집다리나무숲꽃풀잔디하늘구름비눈안개맑음흐림밤낮실내"
    "실외바다해변사막산강호수도시시골논밭정상비정상이상결함균열긁힘스크래치얼룩오염녹부식변형파손누락기포이물질용접찍힘돌"
    "기점색상주름핀홀파단마모양품불량합격불합격나사부품회로기판양성음성폐렴종양결절골절악성병변출혈염증용종낭종궤양안저피부"
    "세포조직흉부병리웃음울음분노놀람두려움공포행복기쁨슬픔평온중립혐오화남장미해바라기튤립민들레데이지백합국화연꽃모란난초"
    "벼밀옥수수콩목화차질병건강잎열매줄기뿌리씨앗잡초쓰레기재활용플라스틱유리종이상자금속배터리병캔옷신발마스크담배안전모흡"
    "연전화화재불꽃연기물웅덩이넘어짐침입얼굴머리손발입코귀머리카락안경모자가방우산휴대폰컴퓨터키보드마우스의자책상소파침대"
    "냉장고텔레비전컵그릇접시칼포크숟가락책시계전등전경배경객체물체기타미상클래스샘플왼쪽오른쪽위아래앞뒤큰중간작은친구학습"
    "검증평가훈련테스트사진이미지동영상데이터라벨정답오답남자여자어린이어른노인학생선생님회사학교병원가게시장공원우리나라사람"
    "시간생각문제세상지금오늘내일어제하나둘셋넷다섯여섯일곱여덟아홉열첫째둘째마지막처음다음이번지난올해작년내년봄여름가을겨"
    "울아침점심저녁음식밥물빵고기김치라면커피우유술맥주소주했었있없않많같좋싫읽앉넓젊값닭삶몫밖앓옳잃흙맛멋것밝"
    "까깨꺼께꼬꾸끄끝꿈꼭딸때떠또뜨띠빠빨빵뻐뽀뿌삐싸쌀쌍써쏘쑤쓰씨짜짝째쩌쪽쭈찌찍깊밑빛낮낯젖몇"
    # family words, and the commonest syllables of Korean surnames and given names
    "엄마아빠할머니아버지언니오빠누나형동생아기가족김이박최정강조윤장임한오서신권황안송류전홍고문양손배백허유남심노하곽성"
    "차주우구민진지엄채원천방공현함변염여추도소석선설마길연위표명기반라왕금옥육인맹제모탁국어은편용준예수영희혜재경미숙자"
    "호훈철태상혁승빈다린나시율건규"
)


@dataclass(frozen=True)
class EncodingGuess:
    """The encoding chosen for an archive's unflagged names, and why.

    ``ambiguous`` lists the candidates whose readings differ but score within
    ``AMBIGUITY_MARGIN`` of the best (best first); empty when the choice is clear.
    """

    encoding: str
    reason: str
    scores: dict[str, float | None] = field(default_factory=dict)
    ambiguous: tuple[str, ...] = ()
    # names of two encodings in one archive (some valid multi-byte UTF-8, others not: two tools wrote
    # into it): no one encoding reads them all, so each UTF-8 name is read as UTF-8 (``utf8_names``,
    # the raw names) and the others in ``encoding`` (0: not mixed)
    mixed_utf8: int = 0
    utf8_names: frozenset[bytes] = frozenset()
    # names flagged UTF-8 whose bytes are this encoding's, like the unflagged names beside them (猫/图.jpg in GBK is
    # valid UTF-8, è/ͼ.jpg): read in ``encoding`` (the raw names, with their UTF-8 reading kept to say so)
    flagged_legacy: tuple[tuple[bytes, str], ...] = ()
    # (names flagged UTF-8, the first of them that is not UTF-8) where one is not: the archive's flags were ignored
    # and those names read as the unflagged ones are
    flag_ignored: tuple[int, bytes] | None = None

    def decode(self, raw: bytes) -> str:
        """``raw``, an unflagged name, read in its encoding."""
        return raw.decode("utf-8") if raw in self.utf8_names else decode_name(raw, self.encoding)


def _script(ch: str) -> str:
    o = ord(ch)
    if o < 0x80:
        return "latin" if ch.isalpha() else "ascii"
    if 0x0400 <= o <= 0x04FF:
        return "cyrillic"
    if 0x0370 <= o <= 0x03FF:
        return "greek"
    if 0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x3134F:
        return "han"  # the unified ideographs, extension A, compatibility, extensions B-G (GB18030's 4-byte ones)
    if 0x3040 <= o <= 0x30FF:
        return "kana"
    if 0xAC00 <= o <= 0xD7A3 or 0x1100 <= o <= 0x11FF or 0x3130 <= o <= 0x318F:
        return "hangul"
    if 0x0E01 <= o <= 0x0E5B:
        return "thai"
    if ch.isalpha() and o < 0x250:
        return "latin"
    return "other"


_FAMILY = {
    "latin": "latin",
    "cyrillic": "cyrillic",
    "greek": "greek",
    "han": "cjk",
    "kana": "cjk",
    "hangul": "cjk",
    "thai": "thai",
}


def _encodes(ch: str, enc: str) -> bool:
    try:
        ch.encode(enc)
        return True
    except UnicodeEncodeError:
        return False


def _han_score(ch: str, enc: str, table: bool = False) -> float:
    if enc in ("gbk", "gb18030", "utf-8"):
        if ch in _SIMPLIFIED or (enc == "utf-8" and (ch in _TRADITIONAL)):
            return 1.0
        if ch in _NAMES and (enc == "utf-8" or ch in _NAMES_SIMPLIFIED):
            return _NAME_SCORE
        if enc == "utf-8":
            return 0.5
        if not _encodes(ch, "gbk"):  # GB18030's own (䶮, 𠮷): rare characters, in people's names above all
            return 0.5
        b = ch.encode("gbk")
        if not 0xB0 <= b[0] <= 0xF7:
            return 0.0
        if b[1] < 0xA1 and not table:  # beyond GB2312, GBK's own additions (GBK/4): traditional and rare
            # characters, as names go (a table's text is typed, traditional characters in it as often as not)
            return 0.45
        return 0.7 if b[0] <= 0xD7 else 0.3
    if enc == "big5":
        if ch in _TRADITIONAL:
            return 1.0
        if ch in _NAMES and ch in _NAMES_TRADITIONAL:
            return _NAME_SCORE
        if not _encodes(ch, "big5"):  # an ETEN addition (碁), read as Windows does
            return 0.2
        return 0.7 if 0xA4 <= ch.encode("big5")[0] <= 0xC6 else 0.2
    if enc == "cp932":
        if ch in _JAPANESE or ch in _COMMON_HAN:  # the commonest Chinese characters; Chinese class names' less
            return 1.0
        if ch in _SIMPLIFIED or ch in _TRADITIONAL:
            return 0.8
        if ch in _NAMES:
            return _NAME_SCORE
        b = ch.encode("cp932")
        return 0.6 if 0x88 <= b[0] <= 0x98 else 0.3 if b[0] <= 0x9F else 0.1
    if enc == "cp949":
        return 0.2  # hanja: rare in Korean file names
    return 0.0


_TENSE = frozenset({1, 4, 8, 10, 13})  # ㄲ ㄸ ㅃ ㅆ ㅉ
_RARE_VOWELS = frozenset({3, 10, 15})  # ㅒ ㅙ ㅞ
_COMMON_FINALS = frozenset({0, 1, 4, 8, 16, 17, 19, 20, 21})  # none, ㄱ ㄴ ㄹ ㅁ ㅂ ㅅ ㅆ ㅇ
# the double finals and ㅋ; the others past the common ones count half (밖 받 낮 꽃 밭 앞 좋 are everyday)
_RARE_FINALS = frozenset({3, 5, 6, 9, 10, 11, 12, 13, 14, 15, 18, 24})


def _hangul_shape(ch: str) -> float:
    """How plausible a KS X 1001 syllable outside the common ones is, by its parts: most Korean text is syllables
    of plain initials, vowels and finals, where the bytes of Chinese or Japanese text read as CP949 give syllables
    with tense initials, rare vowels (ㅙ, ㅞ, ㅢ after a consonant) and rare or double finals (뙚, 틥, 벎)."""
    k = ord(ch) - 0xAC00
    if not 0 <= k < 11172:
        return 0.75  # a jamo of its own
    initial, vowel, final = k // 588, k % 588 // 28, k % 28
    rare = float(vowel in _RARE_VOWELS or (vowel == 19 and initial not in (11, 18)))  # ㅢ: 의, 희
    rare += 1.0 if final in _RARE_FINALS else 0.0 if final in _COMMON_FINALS else 0.5
    rare += 0.5 * (initial in _TENSE and rare > 0)  # 빠, 떡, 쌀 are everyday: a tense initial adds to another rarity
    return 0.75 if rare == 0 else 0.6 if rare <= 0.5 else 0.45 if rare <= 1 else 0.15


def _char_score(ch: str, enc: str, table: bool = False) -> float:
    """How plausible the non-ASCII ``ch`` is in a file name read as ``enc`` (1 common .. -2 garbage).
    ``table``: a text table's cell, where the candidates are UTF-8, GBK and Big5 (no DOS code page):
    Greek letters are a script, not mojibake, and kana read as UTF-8 are Japanese."""
    o = ord(ch)
    cat = unicodedata.category(ch)
    if enc == "utf-8" and (0x1F000 <= o <= 0x1FAFF or 0x2600 <= o <= 0x27BF or 0x2B00 <= o <= 0x2BFF
                           or o in (0x200D, 0xFE0F)) and cat != "Cn":  # fmt: skip
        # an emoji, a dingbat (★, ✈) and what joins them (U+200D, U+FE0F) read as UTF-8: 3 and 4 byte sequences that
        # legacy bytes seldom make; read as a one-byte code page they are 3 or 4 letters of nonsense (🎉: ЁЯОЙ)
        return 0.8
    if cat in ("Cc", "Co", "Cn", "Cs", "Cf"):
        return -2.0
    if 0xFF61 <= o <= 0xFF9F or 0x2500 <= o <= 0x259F:  # half-width katakana, box drawing: mojibake
        return -1.0
    script = _script(ch)
    if script == "han":
        return _han_score(ch, enc, table)
    if script == "kana":
        return 1.0 if enc == "cp932" or (table and enc == "utf-8") else 0.0
    if script == "hangul":
        if enc not in ("cp949", "utf-8"):
            return 0.0
        return 1.0 if ch in _KOREAN else _hangul_shape(ch) if _encodes(ch, "euc_kr") else 0.2
    if script == "cyrillic":
        return _RU_SCORE.get(ch.lower(), 0.1)
    if script == "greek":  # the Greek letters of CP437/CP866 appear only as mojibake in archives (and common Big5
        # characters read as GBK are Greek letters too: 竹 is λ, 肉 ψ)
        return 0.6 if table else -0.5
    if script == "thai":  # (the marks' order is checked by _thai_penalty)
        if enc not in ("cp874", "utf-8"):
            return 0.0
        return 0.9 if ch in _THAI_COMMON else -0.5 if ch in _THAI_RARE else 0.2
    if script == "latin":
        if table and enc in ("cp1250", "utf-8") and ch in _CENTRAL_EUROPEAN:
            return 0.8  # a table's Polish, Czech or Hungarian words (a rival reading of Windows-1250 bytes)
        if enc in ("cp852", "cp1250") and ch in _CENTRAL_EUROPEAN or enc in ("cp857", "cp1254") and ch in _TURKISH:
            return 0.8  # the letters a watched code page is written for (WATCHED: a rival, never chosen alone)
        return next((value for value, letters in _LATIN_TIERS if ch in letters), 0.0)
    if 0x2160 <= o <= 0x216B or 0x2170 <= o <= 0x2179 or 0x2460 <= o <= 0x2469:
        return 0.8  # Roman numerals and circled numbers (Ⅰ级, ①): grades, stages and list marks in CJK text
    if 0x2160 <= o <= 0x217F or 0x2460 <= o <= 0x249B or 0x3220 <= o <= 0x3229:
        return 0.3  # the other numbered forms (⑴, ⒈, ⑾, ㈠): list marks, seldom a name or a label
    if 0xFF21 <= o <= 0xFF3A:
        return 0.5  # full-width capital letters (Ａ类)
    if 0xFF41 <= o <= 0xFF5A:
        return 0.1  # full-width small letters: what a GBK numeral (Ⅰ) becomes read as Big5
    if table and ch in _TEXT_SYMBOLS:
        return 0.3  # the symbols of CJK text (★, ○, √, ℃) in a table's cells: less than its brackets, which Big5
        # reads as such symbols (【猫】 is ▽癡▼)
    if 0xFF01 <= o <= 0xFF5E or 0x3000 <= o <= 0x303F:
        return 0.5  # full-width punctuation and digits in CJK names
    if ch in "№°«»–—’“”•·":
        return 0.2
    return -0.7  # other symbols (±§¤¶¬ⁿ²≈...): mojibake far more often than intent


_TEXT_SYMBOLS = frozenset("○●◎◇◆□■△▲▽▼★☆√×÷℃‰№→←↑↓")  # not ※ nor §: GBK's “ and ” read as Big5
# a cell wrapped in CJK brackets or quotes (【猫】, 《书名》, “好”): a pair, which a wrong reading seldom makes
_PAIRS = {"【": "】", "《": "》", "「": "」", "『": "』", "“": "”", "‘": "’", "〔": "〕", "〈": "〉", "〖": "〗",
          "（": "）", "［": "］", "｛": "｝"}  # fmt: skip
_BRACKETS = frozenset(_PAIRS) | frozenset(_PAIRS.values())


def _word_penalties(text: str, native: frozenset = frozenset()) -> tuple[float, int]:
    """(penalty, letters) for words mixing alphabets (``MБller``) or with a capital after a small
    letter that is not ASCII camel case (``нРВЕР``, ``mÄller``), and Latin words made mostly of
    accented letters (``ÄÔþÑÔ``), not counting the ``native`` letters of a watched code page (``Łódź``)."""
    penalty = 0.0
    word: list[str] = []

    def close() -> float:
        if not word:
            return 0.0
        p = 0.0
        families = {_FAMILY.get(_script(c)) for c in word} - {None}
        alphabets = families & {"latin", "cyrillic", "greek"}
        non_ascii = sum(1 for c in word if ord(c) >= 0x80)
        if len(alphabets) > 1:
            p += 2.0 * non_ascii
        for a, b in zip(word, word[1:]):
            if a.islower() and b.isupper() and (ord(a) >= 0x80 or ord(b) >= 0x80):
                p += 1.0
        accented = sum(1 for c in word if ord(c) >= 0x80 and c not in native)
        if alphabets == {"latin"} and len(word) >= 2 and accented * 2 > len(word):
            p += 0.8 * accented
        return p

    for ch in text:
        if ch.isalpha() and _FAMILY.get(_script(ch)) in ("latin", "cyrillic", "greek"):
            word.append(ch)
        else:
            penalty += close()
            word = []
    penalty += close()
    return penalty, 0


# the consonants, vowels and tone marks of everyday Thai; obsolete letters, Thai digits and signs are rare in names
_THAI_COMMON = frozenset("กขคงจชซดตทนบปพฟมยรลวสหอะัาำิีึืุูเแโใไ่้็์")
_THAI_RARE = frozenset("ฃฅฦฤฯๆ๏๚๛๐๑๒๓๔๕๖๗๘๙ฺ๎")
_THAI_MARKS = frozenset(chr(c) for c in (0x0E31, *range(0x0E34, 0x0E3B), *range(0x0E47, 0x0E4F)))  # above, below
_THAI_LEADING = frozenset("เแโใไ")  # vowels written before their consonant
_THAI = re.compile("[\u0e01-\u0e5b]")


def _thai_penalty(name: str) -> float:
    """Thai spelt against its script: a vowel or tone mark on no consonant (first, or after a space, a digit or
    another script), a leading vowel before no consonant: what other legacy bytes read as CP874 give."""
    if not _THAI.search(name):  # (the walk below only where there is Thai: names are scored per candidate)
        return 0.0
    bad = 0
    for a, b in zip(" " + name, name):
        if b in _THAI_MARKS and not ("\u0e01" <= a <= "\u0e2e" or a in _THAI_MARKS):
            bad += 1
        if a in _THAI_LEADING and not "\u0e01" <= b <= "\u0e2e":
            bad += 1
    if name and name[-1] in _THAI_LEADING:
        bad += 1
    return 1.5 * bad


def _cjk_in_latin(name: str, enc: str | None = None, table: bool = False) -> int:
    """Lone CJK characters touching ASCII letters (``Sommerferien_謘terreich``, ``A砲_nuevo``): one
    legacy byte glued to the next ASCII byte by a double-byte reading. Real names hold runs, but for a
    capital letter standing alone before a character of GB2312 read as GBK (the zones, groups and
    buildings of Chinese labels: ``A区``, ``B栋``, ``C组``), whose two bytes are both past ASCII."""
    padded = f" {name} "
    count = 0
    for i, (a, b, c) in enumerate(zip(padded, padded[1:], padded[2:])):
        if _FAMILY.get(_script(b)) != "cjk" or _FAMILY.get(_script(a)) == "cjk" or _FAMILY.get(_script(c)) == "cjk":
            continue
        if (a.isascii() and a.isalpha()) or (c.isascii() and c.isalpha()):
            lone = a.isascii() and a.isupper() and not (i and padded[i - 1].isalpha()) and not c.isalpha()
            if lone and enc in ("gbk", "gb18030") and (b in _UNITS or (table and b in _SIMPLIFIED)):
                continue  # (a unit's, or in a table a common one: Big5 B區 and CP949 B동 read as GBK are B跋 and B悼,
                # and CP949 syllables after a capital often common characters, against which archives weigh more
                # code pages)
            count += 1
    return count


# what a capital letter names in Chinese labels, standing alone before it (A区, B栋, C组, 3号楼 aside): zones,
# buildings, floors, groups, lines, rows and the like
_UNITS = frozenset("区栋楼层组号班队排列线型类级座厂库室门区段档柜架仓站点口面侧端")
# scripts a name part is written in whole, read as UTF-8 in an archive: a word of two or more letters of one of
# them is 2 or 3 byte sequences no legacy name makes by chance (γάτα, חתול, قطة, कुत्ता, ねこ); one-byte code
# pages read them as Cyrillic or CJK nonsense (кошка aside: Cyrillic is scored as Russian)
_WORD_SCRIPTS = ("GREEK", "HEBREW", "ARABIC", "DEVANAGARI", "ARMENIAN", "GEORGIAN", "HIRAGANA", "KATAKANA", "BENGALI",
                 "TAMIL", "TELUGU", "GUJARATI", "GURMUKHI", "KANNADA", "MALAYALAM", "SINHALA", "LAO", "MYANMAR",
                 "ETHIOPIC", "KHMER", "SYRIAC", "THAANA", "TIBETAN")  # fmt: skip
_WORD_SCORE = 0.8


def _legacy_too(raw: bytes) -> bool:
    """Whether ``raw`` reads as GB2312 or Big5 text as well (each of its bytes past ASCII in a pair of theirs)."""
    return decodes(raw, "gb2312", windows=False) or decodes(raw, "big5", windows=False)


def _word_script(part: str) -> str | None:
    """The one script of :data:`_WORD_SCRIPTS` every non-ASCII character of ``part`` belongs to (its marks too,
    the prolonged sound mark ー with kana), when it holds two letters or more of it; else None."""
    scripts = set()
    letters = 0
    for ch in part:
        if ord(ch) < 0x80:
            continue
        name = unicodedata.name(ch, "")
        if ch in "ー・":
            continue
        word = name.split(" ", 1)[0]
        if word not in _WORD_SCRIPTS:
            return None
        scripts.add("KANA" if word in ("HIRAGANA", "KATAKANA") else word)
        letters += unicodedata.category(ch).startswith("L")
    return next(iter(scripts)) if len(scripts) == 1 and letters >= 2 else None


def _parts(names: list[str]):
    """Each folder name, file stem and cell of ``names``: a whole one made of accented Latin letters alone
    (``è``, ``ţ``, ``èţ``) is two legacy bytes read as UTF-8 (猫 and 牛 in GBK), not a name anyone gives."""
    for n in names:
        for part in n.split("/"):
            stem = part.rsplit(".", 1)[0] if "." in part[1:] else part
            if stem:
                yield stem


def score(names: list[str], enc: str, host: str | None = None, table: bool = False) -> float:
    """Mean plausibility per non-ASCII character of ``names`` read as ``enc`` (higher is better);
    ``table`` as for :func:`_char_score`."""
    if enc == "utf-8":  # macOS writes names decomposed (NFD, e and U+0301): scored as the letters they make
        names = [unicodedata.normalize("NFC", n) for n in names]
    chars = [c for n in names for c in n if ord(c) >= 0x80]
    if not chars:
        return 1.0
    total = sum(_char_score(c, enc, table) for c in chars)
    if table and enc in ("gbk", "gb18030", "big5", "utf-8"):  # not for the rivals: CP949 has the same brackets
        for n in names:
            if len(n) > 2 and _PAIRS.get(n[0]) == n[-1]:  # a bracket pair counts as two common characters
                total += 2.0 - _char_score(n[0], enc, table) - _char_score(n[-1], enc, table)
            elif n and all(c in _BRACKETS for c in n):  # brackets alone (〕, 」」): another encoding's symbols
                total -= sum(0.5 + _char_score(c, enc, table) for c in n)
    # in a table, μ before Latin letters is a unit (μm, μg), not two alphabets in one word
    worded = [n.replace("μ", " ") for n in names] if table else names
    native = _NATIVE.get(enc, frozenset()) if not table else frozenset()
    total -= sum(_word_penalties(w, native)[0] + 1.5 * _cjk_in_latin(n, enc, table) + _thai_penalty(n)
                 for n, w in zip(names, worded))  # fmt: skip
    if enc == "utf-8" and not table:  # a word of one script past Latin and Cyrillic, whole (see _WORD_SCRIPTS),
        # in bytes no GB2312 or Big5 text makes (虾尾 in GBK, CF BA CE B2, is valid UTF-8 'Ϻβ': Greek of GBK's
        # commonest characters; a real Greek, Hebrew or Arabic word has a letter whose second byte is under A1)
        for p in _parts(names):
            if _word_script(p) is not None and not _legacy_too(p.encode()):
                total += sum(max(0.0, _WORD_SCORE - _char_score(c, enc)) for c in p if ord(c) >= 0x80)
    # a name part of accented Latin letters alone (猫 read as UTF-8 è), or of one Cyrillic letter alone (a class
    # folder 'Ñ' of a Spanish alphabet, read by CP866 as 'е'): what one-byte code pages make of other bytes as often
    # as what anyone names a folder
    total -= sum(0.8 * len(p) for p in _parts(names)
                 if all(_script(c) == "latin" and ord(c) >= 0x80 for c in p)
                 or (len(p) == 1 and _script(p) == "cyrillic"))  # fmt: skip
    families = Counter(_FAMILY.get(_script(c), "other") for c in chars)
    letters = {k: v for k, v in families.items() if k != "other"}
    if table and "cjk" in letters:
        letters.pop("greek", None)  # α型, β受体: Greek letters as symbols of Chinese text, not another script
    if letters:
        total -= (sum(letters.values()) - max(letters.values())) * 1.0  # one script across all names
    value = total / len(chars)
    if enc == "utf-8":
        value += 0.3  # valid multi-byte UTF-8 is itself evidence: random legacy bytes rarely are
    if host == "dos":  # DOS/Windows tools write the OEM code page: CP437/850/866 and the CJK ones; some the ANSI
        # one (CP1251, CP1252), none a Unix one (KOI8-R)
        value += 0.1 if enc in _OEM else -0.1
    elif host == "unix":  # Unix tools write the locale's encoding, never a DOS code page
        value += 0.1 if enc in ("utf-8", "koi8_r") else -0.1 if _HOSTS.get(enc) == "dos" else 0.0
    return value


def _cyrillic_case(names: Sequence[str]) -> str | None:
    """ "upper" or "lower" where (nearly) every Cyrillic letter of ``names``, three or more, is of that case."""
    letters = [c for n in names for c in n if _script(c) == "cyrillic" and c.isalpha()]
    if len(letters) < 3:
        return None
    upper = sum(c.isupper() for c in letters) / len(letters)
    return "upper" if upper >= 0.9 else "lower" if upper <= 0.1 else None


def _case_swapped(best: Sequence[str], other: Sequence[str]) -> bool:
    """Whether one reading is Cyrillic capitals alone and the other small letters alone: what KOI8-R and CP1251
    make of each other's bytes (CP1251 'фото' is KOI8-R 'ТНРН'), where a word's case cannot say which was written."""
    cases = {_cyrillic_case(best), _cyrillic_case(other)}
    return cases == {"upper", "lower"}


def _lone_letters(names: Sequence[str]) -> bool:
    """Whether every part of ``names`` (folder, file stem) holding text past ASCII is one Latin or Cyrillic letter."""
    parts = [p for p in _parts(list(names)) if not p.isascii()]
    return bool(parts) and all(len(p) == 1 and p.isalpha() and _script(p) in ("latin", "cyrillic") for p in parts)


def host_family(hosts: list[int]) -> str | None:
    """``"dos"`` or ``"unix"`` when most names come from one kind of host, else None."""
    if not hosts:
        return None
    counts = Counter("dos" if h in _DOS_HOSTS else "unix" if h in _UNIX_HOSTS else None for h in hosts)
    best, n = counts.most_common(1)[0]
    return best if n * 2 > len(hosts) else None


_HIGH_BACKSLASH = re.compile(rb"[\x80-\xff]\\")
_DOUBLE_BYTE = frozenset({"gbk", "gb18030", "big5", "cp932"})  # whose characters may end in a backslash byte


def guess_encoding(raw_names: list[bytes], hosts: list[int] | None = None) -> EncodingGuess:
    """The encoding of ``raw_names`` (member names without the UTF-8 flag) and why.

    Args:
        raw_names: the names as stored.
        hosts: the "version made by" host of each name's member (0 MS-DOS, 3 Unix, 11 NTFS...).
    """
    if not raw_names:
        return EncodingGuess("utf-8", "every name is flagged UTF-8 or carries a Unicode path field", {})
    if all(n.isascii() for n in raw_names):
        return EncodingGuess("ascii", f"all {len(raw_names)} unflagged names are ASCII", {})
    host = host_family(hosts or [])
    scores: dict[str, float | None] = {}
    readings: dict[str, tuple[str, ...]] = {}
    legacy = [n for n in raw_names if not n.isascii()]
    step = max(1, len(legacy) // MAX_SCORED)
    sample = legacy[::step][:MAX_SCORED]  # scoring is Python per character; decoding all is C
    # a backslash right after a byte past ASCII in a name whose folders are parted by '/': the second byte of a GBK,
    # Big5 or Shift-JIS character (構 is 8D 5C), which a one-byte code page would read as a folder's end (cp866:
    # 構造/001.jpg as Н/Св/001.jpg), splitting the names into other folders; no tool parts one name both ways (a
    # name parted by backslashes alone, Café\Müller.jpg beside another tool's readme/notes.txt, is left alone)
    trail = any(b"/" in n and _HIGH_BACKSLASH.search(n) for n in legacy)
    for enc, _ in CANDIDATES:
        errors = _errors(enc)
        try:
            for n in legacy:
                n.decode(enc, errors)
        except UnicodeDecodeError:
            scores[enc] = None
            if enc != "gbk" or not all(decodes(n, "gb18030") for n in legacy):
                continue
            enc, errors = "gb18030", "strict"  # GBK's superset: a name with 䶮 or 𠮷 in it (4-byte characters)
        names = [n.decode(enc, errors)[:SCORED_CHARS] for n in sample]
        readings[enc] = tuple(names)
        scores[enc] = score(names, enc, host)
    if trail and max((scores[e] for e in readings if e in _DOUBLE_BYTE), default=-9.0) >= 0.5:
        # ... where a plausible double-byte reading takes the backslash in (構造/001.jpg); without one, a name
        # like photos/Café\1.jpg is a one-byte name parted both ways, and keeps its reading
        for enc, family in CANDIDATES:
            if family != "any" and enc in readings:
                del readings[enc]
                scores[enc] = None
    ranked = sorted((e for e in readings), key=lambda e: -scores[e])
    if not ranked:
        enc = "gb18030" if all(decodes(n, "gb18030") for n in raw_names) else "cp437"
        return EncodingGuess(enc, "no candidate decodes every name; undecodable bytes are replaced", scores)
    best = ranked[0]
    same = [e for e in ranked[1:] if readings[e] == readings[best]]
    seen = {c for name in readings[best] for c in name if ord(c) >= 0x80}
    # one character's bytes (one CJK character, or two letters of a one-byte code page: 鞄 in CP932 is КУ in CP866)
    runs = {r for n in sample for r in re.findall(rb"[\x80-\xff]+", n)}
    one = len(seen) <= THIN_EVIDENCE_CHARS
    thin = one or (len(runs) == 1 and len(next(iter(runs))) <= 2)
    # every name part with text past ASCII one letter of a one-byte code page alone (the class folders of an
    # alphabet: Ñ, Æ, Ø read by CP866 as е, П, Т): a Latin and a Cyrillic letter are as likely names, so any reading
    # of them as letters is a rival
    lone = _lone_letters(readings[best])
    rivals = []
    for e in ranked[1:]:
        distinct = readings[e] != readings[best] and all(readings[e] != readings[r] for r in rivals)
        close = scores[best] - scores[e] < AMBIGUITY_MARGIN + (GBK_MARGIN if {best, e} & {"gbk", "gb18030"} else 0)
        close = close or (
            thin and scores[best] - scores[e] < THIN_EVIDENCE_MARGIN and scores[e] >= THIN_EVIDENCE_PLAUSIBLE
        )
        close = close or (lone and _lone_letters(readings[e]))
        close = close or _case_swapped(readings[best], readings[e])
        if distinct and close:
            rivals.append(e)
    lettered = any(c.isalpha() for c in seen)  # (° ’ № alone score low as symbols, read right all the same)
    if not rivals and best != "utf-8" and lettered and scores[best] < DOUBTFUL:  # no reading is plausible
        runner = next((e for e in ranked[1:] if readings[e] != readings[best]), None)
        rivals = [runner] if runner is not None else []
    if one and "gbk" in rivals:  # one character cannot choose: the encoding of the archives datakit reads most
        rivals = [best, *(e for e in rivals if e != "gbk")]
        best = "gbk"
        same = [e for e in ranked if e != best and readings[e] == readings[best]]
    if best != "utf-8" and not thin:  # (two bytes read as two letters prove nothing: 鍵 in GBK is CP852 'Ši')
        rivals += _watched_rivals(legacy, sample, host, best, rivals, readings, scores)
    n = len(raw_names)
    where = f" written on {'DOS/Windows' if host == 'dos' else 'Unix'}" if host else ""
    if rivals:
        options = " or ".join([best, *rivals])
        reason = (
            f"ambiguous: {options}; pass --encoding ({n} unflagged names{where}; "
            f"plausibility {', '.join(f'{e} {scores[e]:.2f}' for e in [best, *rivals])})"
        )
    else:
        reason = f"{n} unflagged names{where} decode as {best} with plausibility {scores[best]:.2f}"
        runner = next((e for e in ranked[1:] if readings[e] != readings[best]), None)
        if runner is not None:
            reason += f" (next: {runner} {scores[runner]:.2f})"
    if same:
        reason += f"; {', '.join(same)} {'reads' if len(same) == 1 else 'read'} them the same"
    guess = EncodingGuess(best, reason, scores, tuple([best, *rivals]) if rivals else ())
    if best != "utf-8" and scores.get("utf-8") is None:
        return _two_encodings(raw_names, hosts, legacy, guess)
    return guess


def _watched_rivals(legacy: list[bytes], sample: list[bytes], host: str | None, best: str, rivals: list[str],
                    readings: dict[str, tuple[str, ...]], scores: dict[str, float | None]) -> list[str]:  # fmt: skip
    """The :data:`WATCHED` code pages whose reading of the names is plausible (``WATCH_PLAUSIBLE``) and far more so
    than the best candidate's (``WATCH_MARGIN``), most plausible first; ``readings`` and ``scores`` get theirs."""
    if scores[best] + WATCH_MARGIN > 1.1:  # no reading scores past 1.1 (1 a character and the host's 0.1): none can
        return []
    found = []
    taken = {readings[e] for e in [best, *rivals]}
    for enc, _ in WATCHED:
        try:
            for n in legacy:
                n.decode(enc)
        except UnicodeDecodeError:
            continue
        names = tuple(n.decode(enc)[:SCORED_CHARS] for n in sample)
        if names in taken:
            continue
        value = score(list(names), enc, host)
        if value >= WATCH_PLAUSIBLE and value >= scores[best] + WATCH_MARGIN:
            taken.add(names)
            readings[enc], scores[enc] = names, value
            found.append(enc)
    return sorted(found, key=lambda e: -scores[e])


def _two_encodings(raw_names: list[bytes], hosts: list[int] | None, legacy: list[bytes],
                   whole: EncodingGuess) -> EncodingGuess:  # fmt: skip
    """``whole`` (one encoding for all names), or, where multi-byte UTF-8 names stand beside names
    that are not UTF-8 (two tools wrote into the archive), the others' encoding with each UTF-8
    name read as UTF-8. Only where no one encoding can be right: the others' encoding fails on
    some of the UTF-8 names, and the names read so are more plausible together than ``whole``
    reads them. A short legacy name is often valid UTF-8 too (锌 in GBK is "п", 猫 is "è"): in an
    archive of one encoding it stays in that encoding."""
    utf8 = {n for n in legacy if decodes(n, "utf-8", windows=False)}
    if not utf8 or len(utf8) == len(legacy):
        return whole
    rest = [i for i, n in enumerate(raw_names) if n not in utf8]
    host = host_family(hosts or [])
    others = guess_encoding([raw_names[i] for i in rest], [hosts[i] for i in rest] if hosts else None)
    enc = others.encoding
    if whole.scores.get(enc) is not None:
        return _suspect(whole, utf8, len(legacy))  # the others' encoding reads every name: one encoding may be right

    def read(n: bytes) -> str:
        return n.decode("utf-8") if n in chosen else decode_name(n, enc)

    chosen = frozenset(
        n for n in utf8
        if not decodes(n, enc) or score([n.decode("utf-8")], "utf-8") > score([decode_name(n, enc)], enc) + 0.5
    )  # fmt: skip
    sample = legacy[:: max(1, len(legacy) // MAX_SCORED)][:MAX_SCORED]
    one = score([decode_name(n, whole.encoding) for n in sample], whole.encoding, host)
    if not chosen or score([read(n) for n in sample], enc, host) <= one + 0.3:
        return _suspect(whole, utf8, len(legacy))
    reason = (f"{others.reason}; {len(chosen)} of the {len(legacy)} non-ASCII names are UTF-8 (another tool "
              "wrote them), each read as UTF-8")  # fmt: skip
    return EncodingGuess(enc, reason, others.scores, others.ambiguous, len(chosen), chosen)


def _suspect(whole: EncodingGuess, utf8: set[bytes], legacy: int) -> EncodingGuess:
    """``whole``, saying how many of the names valid as UTF-8 read better so than in its encoding: two tools may
    have written the archive (cp1251 names beside UTF-8 ones: cp1251 reads both), or a short legacy name is
    valid UTF-8 by chance (锌 in GBK is "п"). Which, the names cannot tell: all are read in the one encoding,
    and a warning says some may be wrong (``mixed_utf8``, with no ``utf8_names``)."""
    enc = whole.encoding
    n = sum(1 for r in utf8 if score([r.decode("utf-8")], "utf-8") > score([decode_name(r, enc)], enc) + 0.5)
    if not n:
        return whole
    reason = f"{whole.reason}; but {n} of the {legacy} non-ASCII names read better as UTF-8"
    return EncodingGuess(enc, reason, whole.scores, whole.ambiguous, n)


def flagged_legacy(guess: EncodingGuess, flagged: Sequence[bytes], unflagged: Sequence[bytes],
                   host: str | None) -> EncodingGuess:  # fmt: skip
    """``guess`` (the encoding of an archive's ``unflagged`` names) with the names among ``flagged`` (flagged
    UTF-8, valid UTF-8) that are its encoding's bytes: where it was chosen without doubt, a name that in it lies in
    a folder of the unflagged names (猫/图.jpg beside 猫/狗.jpg) and reads as plausible text, where as UTF-8 it lies
    in a folder of its own and reads as unlikely text (è/ͼ.jpg) was flagged by a tool that set the flag whatever
    the bytes. A UTF-8 name beside legacy ones (©2020.pdf, which 7-Zip flags where the code page lacks ©) keeps
    its flag."""
    if guess.encoding in ("utf-8", "ascii") or guess.ambiguous or not flagged:
        return guess
    folders = {guess.decode(r).replace("\\", "/").split("/")[0] for r in unflagged if b"/" in r or b"\\" in r}
    found = []
    for raw in flagged:
        if raw.isascii() or not decodes(raw, guess.encoding):
            continue
        mine, theirs = decode_name(raw, guess.encoding), raw.decode("utf-8")
        if "/" not in mine or mine.split("/")[0] not in folders or theirs.split("/")[0] in folders:
            continue
        legacy, utf8 = score([mine[:SCORED_CHARS]], guess.encoding, host), score([theirs[:SCORED_CHARS]], "utf-8", host)
        if legacy >= 0.7 and legacy - utf8 >= 0.5:
            found.append((raw, theirs))
    if not found:
        return guess
    return EncodingGuess(guess.encoding, guess.reason, guess.scores, guess.ambiguous, guess.mixed_utf8,
                         guess.utf8_names, tuple(found))  # fmt: skip


def decodes(raw: bytes, enc: str, windows: bool = True) -> bool:
    """Whether ``raw`` is valid text in ``enc`` (as Windows reads GBK and Big5 names, unless not ``windows``)."""
    try:
        raw.decode(enc, _errors(enc) if windows else "strict")
        return True
    except UnicodeDecodeError:
        return False


_COMMON_HAN = frozenset(_HANZI_COMMON + _HANZI_COMMON_TRAD)
_SIMPLIFIED = frozenset(_HANZI_COMMON + _LABELS_SIMPLIFIED)
_TRADITIONAL = frozenset(_HANZI_COMMON_TRAD + _LABELS_TRADITIONAL)
# a name's characters count a little less than the commonest: Korean syllables read as GBK land on some (첨부: 梅何)
_NAMES = frozenset(_NAMES_SIMPLIFIED + _NAMES_TRADITIONAL) - _SIMPLIFIED - _TRADITIONAL
_NAME_SCORE = 0.9
_JAPANESE = frozenset(_KANJI_COMMON + _LABELS_JAPANESE)
_KOREAN = frozenset(_HANGUL_COMMON + _HANGUL_LABELS)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def undecoded_names(root: str, names: Sequence[str], wanted: Sequence[str] = ()) -> str | None:
    """A line for names under ``root`` (relative to it) that a tool wrote as a legacy encoding's bytes: not
    UTF-8 on disk (lone surrogates in Python), or UTF-8 by chance (图片 in GBK reads as UTF-8 'ͼƬ') but naming,
    read in that encoding, a file of ``wanted`` (a table's missing files). What they read as, and how to fix
    them; None when there are none. A GBK archive extracted by ``unzip`` or an old tool leaves such names."""
    bad = [n for n in names if not n.isascii() and _LONE_SURROGATE.search(n)]
    found: tuple[str, str] | None = None  # (a name on disk, the encoding it names a wanted file in)
    wanted = {w.replace("\\", "/") for w in wanted}
    if wanted:
        for n in names:
            if n.isascii():
                continue
            raw = os.fsencode(n)
            enc = next((e for e in _TOOL_ENCODINGS if decodes(raw, e) and decode_name(raw, e) in wanted), None)
            if enc is not None:
                found = (n, enc)
                break
    if not bad and found is None:
        return _utf8_by_chance(root, names)
    if found is not None:
        first, enc = found
        count = sum(1 for n in names if not n.isascii() and decode_name(os.fsencode(n), enc) in wanted)
        why = f"{count} name{'s' * (count > 1)} on disk {'are' if count > 1 else 'is'} the table's in {enc} bytes"
    else:
        first = bad[0]
        raw = [os.fsencode(n) for n in bad[:MAX_SCORED]]
        # the parts that are not UTF-8 (a UTF-8 class folder, 猫/, holding a GBK file name is not GBK)
        parts = [b for r in raw for b in r.split(b"/") if not b.isascii() and not decodes(b, "utf-8", windows=False)]
        guess = guess_encoding(parts, [0] * len(parts))
        enc = next((e for e in guess.ambiguous if e in _TOOL_ENCODINGS), guess.encoding)  # a Windows zip's, first
        why = f"{len(bad)} name{'s' * (len(bad) > 1)} on disk {'are' if len(bad) > 1 else 'is'} not UTF-8"
        if enc not in _TOOL_ENCODINGS:  # no East Asian Windows encoding reads them: no archive tool to blame
            return (f"{root}: {why} ({ascii(first)}); rename them to UTF-8 (convmv -f ENCODING -t utf-8 -r "
                    f"--notest {root}, with the encoding they were written in)")  # fmt: skip
    shown = decode_name(os.fsencode(first), enc)
    if found is None:  # names not UTF-8: a part that is (a class folder made by hand, 猫/) stays as it reads
        shown = "/".join(p.decode("utf-8") if decodes(p, "utf-8", windows=False) else decode_name(p, enc)
                         for p in os.fsencode(first).split(b"/"))  # fmt: skip
    return (f"{root}: {why} ({ascii(first)} is {shown!r} in {enc}): extracted by a tool that did not decode the "
            f"archive's names; extract it again with unzip-gbk, or rename them (convmv -f {enc} -t utf-8 -r "
            f"--notest {root})")  # fmt: skip


_TOOL_ENCODINGS = ("gbk", "gb18030", "big5", "cp932", "cp949")  # what Windows in East Asia writes names in


_TWO_BYTE_RUN = re.compile("[\u0080-\u07ff]+")


def _mixed_run(part: str) -> bool:
    """Whether ``part`` holds a run of two or more letters of U+0080..U+07FF (what a GBK or Big5 pair reads as in
    UTF-8) of more than one script: GBK's 图片 is 'ͼƬ', Greek and Latin. Words of one alphabet (кот, Ελλάδα, æøå),
    letters alone (è, α), and runs with anything but letters in them (a combining accent of a name from macOS,
    «», °, ·, a modifier letter such as Ukrainian's apostrophe ʼ, µ) are none."""
    for m in _TWO_BYTE_RUN.finditer(part):
        run = m.group()
        if len(run) < 2 or not all(c.isalpha() and unicodedata.category(c) in ("Lu", "Ll") for c in run):
            continue
        if len({"greek" if c == "\u00b5" else _script(c) for c in run}) > 1:
            return True
    return False


def _utf8_by_chance(root: str, names: Sequence[str]) -> str | None:
    """A line for names on disk that are UTF-8 but read as no one writes (GBK's 图片 is 'ͼƬ': every non-ASCII part
    of the names made of the characters a GBK or Big5 pair reads as in UTF-8, some of them mixing scripts within a
    word) where GBK or Big5 reads them as plausible names: bytes a tool wrote in that encoding, perhaps, which UTF-8
    cannot tell (so said, not refused); None otherwise, on at most ``MAX_SCORED`` of the names' non-ASCII parts.
    A lone letter ('è', GBK's 猫) is not said: French, Danish or Greek letters as names read so too."""
    wide = [n for n in names if not n.isascii()]
    if not wide:
        return None
    spread = wide[:: max(1, len(wide) // (4 * MAX_SCORED))]  # (a million names: a few thousand looked at)
    parts = list(dict.fromkeys(p for n in spread for p in n.split("/") if not p.isascii()))
    sample = parts[:: max(1, len(parts) // MAX_SCORED)][:MAX_SCORED]
    if any(ord(c) > 0x7FF for p in sample for c in p) or not any(map(_mixed_run, sample)):
        return None
    raw = [p.encode("utf-8", "surrogateescape") for p in sample]
    for enc in ("gbk", "big5"):
        if all(decodes(r, enc, windows=False) for r in raw) and score([r.decode(enc) for r in raw], enc) >= 0.5:
            count, first = len(wide), wide[0]
            shown = "/".join(decode_name(p.encode("utf-8", "surrogateescape"), enc) if not p.isascii() else p
                             for p in first.split("/"))  # fmt: skip
            return (f"{root}: {count} name{'s' * (count > 1)} on disk read as UTF-8 as letters no name is written "
                    f"in ({first!r}), and as {enc} as {shown!r}: if a tool wrote them in {enc} (a Windows zip "
                    f"extracted by unzip), extract it again with unzip-gbk, or rename them (convmv -f {enc} -t utf-8 "
                    f"-r --notest {root}); if {first!r} is meant, nothing is wrong")  # fmt: skip
    return None


def json_text(obj, **kw) -> str:
    """``json.dumps(obj, ensure_ascii=False, **kw)`` that can be written as UTF-8 whatever the file
    names in it: a name that is not UTF-8 (Latin-1 from an old system) comes from the filesystem
    with lone surrogates (surrogateescape), which UTF-8 cannot encode; they are written as JSON
    escapes instead, so the text reads back the same. Text without them is unchanged."""
    text = json.dumps(obj, ensure_ascii=False, **kw)
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def natural_key(name: str) -> list:
    """A sort key that orders the numbers in names by value: ``train-2`` before ``train-10`` (the shards a glob
    matches, in the order they were made), where plain text order puts ``train-10`` first."""
    return [(0, int(part), part) if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name) if part]
